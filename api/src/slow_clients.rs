//! Connections that hold the server without asking anything of it: a client
//! that sends a request's headers a byte at a time (slowloris), or that keeps
//! an idle keep-alive connection open forever. poem's server sets no header
//! read timeout (hyper has one only when given a timer, which poem does not
//! give it), and its idle timeout counts a single byte as activity, so the
//! bound is kept here, on the socket: [`Guarded`] watches the bytes go by.
//!
//! - From the first byte of a request to the end of its headers (a blank
//!   line) the client has [`HEADER_TIMEOUT`].
//! - Between requests a connection with no traffic either way is closed after
//!   [`IDLE_TIMEOUT`].
//! - Once a request's headers are in, the handler's time is its own (long
//!   polls and streams are answers), and its body is bounded by
//!   [`crate::body_limit`] ([`BODY_TIMEOUT`]).
//!
//! An HTTP/2 connection (prior knowledge) is framed, not line-based: it gets
//! the idle bound only.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use poem::http::uri::Scheme;
use poem::listener::Acceptor;
use poem::web::{LocalAddr, RemoteAddr};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Time from a request's first byte to the end of its headers: far more than
/// any honest client needs (headers are at most a few KB), short enough that
/// a slow sender cannot hold many connections for long.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// Time a keep-alive connection may sit with no traffic between requests
/// (nginx's default `keepalive_timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(75);
/// Time to read a whole request body (at most 1 MiB by default: 35 KB/s).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// An acceptor whose connections are [`Guarded`].
pub struct GuardedAcceptor<A>(pub A);

impl<A: Acceptor> Acceptor for GuardedAcceptor<A> {
    type Io = Guarded<A::Io>;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.0.local_addr()
    }

    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Io, LocalAddr, RemoteAddr, Scheme)>> + Send {
        let accepted = self.0.accept();
        async move {
            let (io, local, remote, scheme) = accepted.await?;
            Ok((Guarded::new(io, HEADER_TIMEOUT, IDLE_TIMEOUT), local, remote, scheme))
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// No request in progress: the idle bound runs.
    Idle,
    /// A request's headers are arriving: the header bound runs.
    Headers,
    /// Headers are in and no answer has been written yet: no bound here.
    InRequest,
    /// An HTTP/2 connection: the idle bound, reset by any traffic.
    H2,
}

/// A connection under the header and idle bounds.
pub struct Guarded<T> {
    inner: T,
    phase: Phase,
    /// Whether any byte has been read (the HTTP/2 preface comes first).
    started: bool,
    /// The last three bytes read, to find a blank line split across reads.
    tail: Vec<u8>,
    deadline: Pin<Box<Sleep>>,
    header_timeout: Duration,
    idle_timeout: Duration,
}

impl<T> Guarded<T> {
    pub fn new(inner: T, header_timeout: Duration, idle_timeout: Duration) -> Guarded<T> {
        Guarded {
            inner,
            phase: Phase::Idle,
            started: false,
            tail: Vec::with_capacity(8),
            deadline: Box::pin(tokio::time::sleep(idle_timeout)),
            header_timeout,
            idle_timeout,
        }
    }

    fn arm(&mut self, after: Duration) {
        self.deadline.as_mut().reset(Instant::now() + after);
    }

    /// Moves the phase on for bytes just read.
    fn saw_read(&mut self, bytes: &[u8]) {
        if !self.started {
            self.started = true;
            if bytes.starts_with(H2_PREFACE) {
                self.phase = Phase::H2;
            }
        }
        match self.phase {
            Phase::H2 => self.arm(self.idle_timeout),
            Phase::InRequest => {}
            Phase::Idle | Phase::Headers => {
                if self.phase == Phase::Idle {
                    self.phase = Phase::Headers;
                    self.tail.clear();
                    self.arm(self.header_timeout);
                }
                self.tail.extend_from_slice(bytes);
                if self.tail.windows(4).any(|w| w == b"\r\n\r\n") {
                    self.phase = Phase::InRequest;
                }
                let keep = self.tail.len().saturating_sub(3);
                self.tail.drain(..keep);
            }
        }
    }

    /// An answer is being written: the request is over, or (a stream) alive.
    fn saw_write(&mut self) {
        if self.phase == Phase::InRequest || self.phase == Phase::Idle || self.phase == Phase::H2 {
            if self.phase == Phase::InRequest {
                self.phase = Phase::Idle;
            }
            self.arm(self.idle_timeout);
        }
    }

    fn bounded(&self) -> bool {
        self.phase != Phase::InRequest
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let this = &mut *self;
                let new = &buf.filled()[before..];
                if !new.is_empty() {
                    this.saw_read(new);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if self.bounded() && self.deadline.as_mut().poll(cx).is_ready() => {
                let what = if self.phase == Phase::Headers { "request headers" } else { "a request" };
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, format!("no complete {what} in time"))))
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.saw_write();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.saw_write();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const SHORT: Duration = Duration::from_millis(200);

    /// A guarded server end and the client's end of one connection.
    fn pair() -> (Guarded<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
        let (server, client) = tokio::io::duplex(1024);
        (Guarded::new(server, SHORT, SHORT * 3), client)
    }

    async fn read_until_error(server: &mut Guarded<tokio::io::DuplexStream>) -> io::Error {
        let mut buf = [0u8; 64];
        loop {
            match server.read(&mut buf).await {
                Ok(0) => panic!("EOF, not a timeout"),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    #[tokio::test]
    async fn headers_sent_a_byte_at_a_time_are_cut_off() {
        let (mut server, mut client) = pair();
        tokio::spawn(async move {
            for b in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().cycle() {
                if client.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(SHORT / 10).await;
            }
        });
        // Bytes keep coming, so only the header bound can end this.
        let e = tokio::time::timeout(Duration::from_secs(60), read_until_error(&mut server)).await;
        assert_eq!(e.expect("cut off though bytes kept coming").kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_request_whose_headers_are_in_is_not_bounded_until_answered() {
        let (mut server, mut client) = pair();
        client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r").await.unwrap();
        client.write_all(b"\n").await.unwrap();
        let mut buf = [0u8; 64];
        let mut got = 0;
        while got < 27 {
            got += server.read(&mut buf).await.unwrap();
        }
        // The handler takes longer than every bound: the connection waits.
        let waited = tokio::time::timeout(SHORT * 5, server.read(&mut buf)).await;
        assert!(waited.is_err(), "still open while the request is being handled");
        // Once answered, an idle connection is closed after the idle bound.
        server.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
        let started = Instant::now();
        let e = read_until_error(&mut server).await;
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= SHORT * 3 - Duration::from_millis(50));
    }

    #[tokio::test]
    async fn http2_connections_are_held_only_to_the_idle_bound() {
        // An idle bound far above the gaps below, so a slow machine cannot
        // reach it; each gap is past the header bound.
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = Guarded::new(server, SHORT, SHORT * 50);
        client.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        // Binary frames with no blank line.
        for _ in 0..3 {
            tokio::time::sleep(SHORT * 2).await;
            client.write_all(&[0, 0, 0, 4, 1]).await.unwrap();
            assert!(server.read(&mut buf).await.unwrap() > 0, "still open");
        }
    }
}
