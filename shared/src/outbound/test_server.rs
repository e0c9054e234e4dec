//! A tiny keep-alive HTTP/1.1 server for unit tests of code that sends
//! requests (here and in the worker, through the `test-server` feature):
//! answers with a script of raw responses (the last one repeating) and
//! records each request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

pub struct TestServer {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestServer {
    pub async fn start(script: &[&'static str]) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/run", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script: Arc<Mutex<Vec<&'static str>>> = Arc::new(Mutex::new(script.to_vec()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                let script = Arc::clone(&script);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 16384];
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let headers: HashMap<String, String> = head
                            .lines()
                            .skip(1)
                            .filter_map(|l| l.split_once(':'))
                            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                            .collect();
                        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                        if buf.len() < end + 4 + len {
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        }
                        let body = buf[end + 4..end + 4 + len].to_vec();
                        buf.drain(..end + 4 + len);
                        log.lock().unwrap().push(Seen { headers, body });
                        let response = {
                            let mut s = script.lock().unwrap();
                            if s.len() > 1 {
                                s.remove(0)
                            } else {
                                s[0]
                            }
                        };
                        if sock.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        TestServer { url, seen }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}
