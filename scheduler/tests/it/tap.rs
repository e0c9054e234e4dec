//! A TCP tap between a client and Postgres or Redis that counts what the
//! client asks: Postgres statements (simple `Query` and extended-protocol
//! `Execute` messages) or Redis commands (RESP arrays). The count is exact
//! and immediate, unlike `pg_stat_database`, which backends report up to
//! ten seconds late when idle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the tap parses in the client's bytes.
#[derive(Clone, Copy, Debug)]
pub enum Protocol {
    Postgres,
    Redis,
}

/// A running tap: connect to `addr` instead of the server.
pub struct Tap {
    pub addr: std::net::SocketAddr,
    count: Arc<AtomicU64>,
}

impl Tap {
    /// Starts a tap in front of `upstream` (`host:port`). It lives as long
    /// as the test's runtime.
    pub async fn start(upstream: &str, protocol: Protocol) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the tap");
        let addr = listener.local_addr().expect("tap address");
        let count = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_string();
        let total = count.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                tokio::spawn(pipe(client, server, protocol, total.clone()));
            }
        });
        Tap { addr, count }
    }

    /// Statements or commands counted so far, over every connection.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

async fn pipe(client: TcpStream, server: TcpStream, protocol: Protocol, count: Arc<AtomicU64>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let mut parser = Parser::new(protocol);
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            count.fetch_add(parser.feed(&buf[..n]), Ordering::SeqCst);
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// Counts complete requests in a client's byte stream.
struct Parser {
    protocol: Protocol,
    buf: Vec<u8>,
    /// Postgres: still in the untyped startup messages.
    startup: bool,
}

impl Parser {
    fn new(protocol: Protocol) -> Parser {
        Parser { protocol, buf: Vec::new(), startup: true }
    }

    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.buf.extend_from_slice(bytes);
        let mut n = 0;
        loop {
            let step = match self.protocol {
                Protocol::Postgres => self.pg_message(),
                Protocol::Redis => resp_command(&self.buf),
            };
            let Some((len, counts)) = step else { return n };
            self.buf.drain(..len);
            n += counts as u64;
        }
    }

    /// One whole frontend message at the front of the buffer: its length
    /// and whether it runs a statement.
    fn pg_message(&mut self) -> Option<(usize, bool)> {
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if self.startup {
            // Length, then a code: SSL or GSS encryption requests (answered
            // with a single byte) come before the startup message proper.
            if self.buf.len() < 8 || self.buf.len() < be32(&self.buf) {
                return None;
            }
            let (len, code) = (be32(&self.buf), be32(&self.buf[4..]));
            if code != 80877103 && code != 80877104 {
                self.startup = false;
            }
            return Some((len, false));
        }
        if self.buf.len() < 5 || self.buf.len() < 1 + be32(&self.buf[1..]) {
            return None;
        }
        Some((1 + be32(&self.buf[1..]), matches!(self.buf[0], b'Q' | b'E')))
    }
}

/// One whole RESP command (`*<n>` then n bulk strings) at the front of
/// `b`: its length. Inline commands are not used by the client library.
fn resp_command(b: &[u8]) -> Option<(usize, bool)> {
    fn line(b: &[u8], at: usize) -> Option<(i64, usize)> {
        let end = at + b.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&b[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    }
    if b.first()? != &b'*' {
        // Not a command: skip one byte so a surprise cannot stall the count.
        return Some((1, false));
    }
    let (items, mut at) = line(b, 0)?;
    for _ in 0..items.max(0) {
        let (len, next) = line(b, at)?;
        at = next + len.max(0) as usize + 2;
        if b.len() < at {
            return None;
        }
    }
    Some((at, true))
}

#[test]
fn parsers_count_whole_requests_only() {
    let mut r = Parser::new(Protocol::Redis);
    let cmd = b"*2\r\n$4\r\nPING\r\n$3\r\na\r\n\r\n";
    assert_eq!(r.feed(&cmd[..10]), 0);
    assert_eq!(r.feed(&cmd[10..]), 1);
    assert_eq!(r.feed(b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"), 2);

    let mut p = Parser::new(Protocol::Postgres);
    let ssl = [0, 0, 0, 8, 4, 210, 22, 47];
    let startup = [0, 0, 0, 9, 0, 3, 0, 0, 0];
    let msg = |t: u8, body: &[u8]| {
        let mut m = vec![t];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    };
    let mut stream = Vec::new();
    stream.extend_from_slice(&ssl);
    stream.extend_from_slice(&startup);
    stream.extend(msg(b'Q', b"BEGIN\0"));
    stream.extend(msg(b'P', b"\0SELECT 1\0\0\0"));
    stream.extend(msg(b'B', b"\0\0\0\0\0\0\0\0"));
    stream.extend(msg(b'E', b"\0\0\0\0\0"));
    stream.extend(msg(b'S', b""));
    let (a, b) = stream.split_at(20);
    assert_eq!(p.feed(a) + p.feed(b), 2, "BEGIN and one Execute");
}
