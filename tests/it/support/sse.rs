//! A Server-Sent Events client as the tests read streams: opens a stream,
//! parses its events with the CLI's parser (`switchyard_shared::sse`), and
//! waits on them with a deadline.

use std::collections::VecDeque;
use std::time::Duration;

pub use switchyard_shared::sse::Event as SseEvent;
use switchyard_shared::sse::Parser;

use crate::harness::{TestEnv, SECRET};

/// How long a test waits for the next event before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

pub struct Sse {
    resp: reqwest::Response,
    parser: Parser,
    /// Events parsed and not yet taken.
    ready: VecDeque<SseEvent>,
    pub status: u16,
    pub content_type: String,
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
        Sse { resp, parser: Parser::default(), ready: Default::default(), status, content_type }
    }

    /// The next event; `None` when the server closed the stream. Panics
    /// after [`WAIT`] without one.
    pub async fn next(&mut self) -> Option<SseEvent> {
        tokio::time::timeout(WAIT, self.next_inner()).await.unwrap_or_else(|_| panic!("no event within {WAIT:?}"))
    }

    async fn next_inner(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            match self.resp.chunk().await {
                Ok(Some(chunk)) => self.ready.extend(self.parser.push(&String::from_utf8_lossy(&chunk))),
                Ok(None) => return None,
                Err(e) => panic!("the stream broke: {e}"),
            }
        }
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
