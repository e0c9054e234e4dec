//! A Server-Sent Events client as the tests read streams: opens a stream,
//! parses its events (`event:`, `id:`, `data:`; comments are heartbeats),
//! and waits on them with a deadline.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestEnv, SECRET};

/// How long a test waits for the next event before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Debug)]
pub struct SseEvent {
    pub event: String,
    pub id: String,
    pub data: Value,
}

pub struct Sse {
    resp: reqwest::Response,
    buf: String,
    pub status: u16,
    pub content_type: String,
    /// Comment lines seen (heartbeats).
    pub comments: usize,
}

impl Sse {
    /// Opens `path` on `base` with `token` (the internal secret when `None`)
    /// and, when given, `Last-Event-ID`.
    pub async fn open(env: &TestEnv, base: &str, path: &str, token: Option<&str>, last_event_id: Option<&str>) -> Sse {
        let mut req = env.http.get(format!("{base}{path}")).bearer_auth(token.unwrap_or(SECRET));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.expect("open the stream");
        let status = resp.status().as_u16();
        let content_type =
            resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        Sse { resp, buf: String::new(), status, content_type, comments: 0 }
    }

    /// The next event; `None` when the server closed the stream. Panics
    /// after [`WAIT`] without one.
    pub async fn next(&mut self) -> Option<SseEvent> {
        tokio::time::timeout(WAIT, self.next_inner()).await.unwrap_or_else(|_| panic!("no event within {WAIT:?}"))
    }

    async fn next_inner(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if let Some(e) = self.parse(&block) {
                    return Some(e);
                }
                continue;
            }
            match self.resp.chunk().await {
                Ok(Some(chunk)) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(None) => return None,
                Err(e) => panic!("the stream broke: {e}"),
            }
        }
    }

    fn parse(&mut self, block: &str) -> Option<SseEvent> {
        let (mut event, mut id, mut data) = (String::from("message"), String::new(), String::new());
        let mut any = false;
        for line in block.lines() {
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            let (k, v) = line.split_once(':').map_or((line, ""), |(k, v)| (k, v.strip_prefix(' ').unwrap_or(v)));
            any = true;
            match k {
                "event" => event = v.to_string(),
                "id" => id = v.to_string(),
                "data" => {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(v);
                }
                _ => {}
            }
        }
        any.then(|| SseEvent { event, id, data: serde_json::from_str(&data).unwrap_or(Value::Null) })
    }

    /// Events until (and with) the first one `stop` accepts.
    pub async fn until(&mut self, stop: impl Fn(&SseEvent) -> bool) -> Vec<SseEvent> {
        let mut out = Vec::new();
        loop {
            let e = self.next().await.unwrap_or_else(|| panic!("the stream ended first; got {out:#?}"));
            let done = stop(&e);
            out.push(e);
            if done {
                return out;
            }
        }
    }

    /// Every event until the server closes the stream.
    pub async fn rest(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Some(e) = self.next().await {
            out.push(e);
        }
        out
    }
}
