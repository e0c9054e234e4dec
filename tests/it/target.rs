//! A local HTTP target that records every request and answers from a script.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poem::listener::{Acceptor, Listener, TcpListener};
use poem::web::Data;
use poem::{handler, EndpointExt, Request, Response, Route};
use serde_json::Value;

#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub raw: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply { status, body: r#"{"ok":true}"#.into(), delay: Duration::ZERO, headers: vec![] }
    }
    pub fn json(status: u16, body: &str) -> Reply {
        Reply { body: body.into(), ..Reply::status(status) }
    }
    pub fn slow(delay: Duration) -> Reply {
        Reply { delay, ..Reply::status(200) }
    }
}

#[derive(Default)]
struct Inner {
    requests: Mutex<Vec<Recorded>>,
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    spans: Mutex<Vec<Span>>,
}

/// When one request arrived and when its answer was sent, with its body.
#[derive(Clone, Debug)]
pub struct Span {
    pub body: Value,
    pub start: Instant,
    pub end: Instant,
}

#[derive(Clone)]
pub struct Target {
    inner: Arc<Inner>,
    pub url: String,
}

#[handler]
async fn hook(req: &Request, body: String, Data(inner): Data<&Arc<Inner>>) -> Response {
    let start = Instant::now();
    let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let rec = Recorded {
        path: req.uri().path().to_string(),
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect(),
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
        raw: body,
    };
    let span_body = rec.body.clone();
    inner.requests.lock().unwrap().push(rec);
    let reply = inner
        .script
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| inner.default.lock().unwrap().clone())
        .unwrap_or_else(|| Reply::status(200));
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    inner.spans.lock().unwrap().push(Span { body: span_body, start, end: Instant::now() });
    inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut b = Response::builder()
        .status(poem::http::StatusCode::from_u16(reply.status).unwrap())
        .content_type("application/json");
    for (k, v) in reply.headers {
        b = b.header(k, v);
    }
    b.body(reply.body)
}

impl Target {
    pub async fn start() -> Target {
        let inner = Arc::new(Inner::default());
        let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await.expect("bind target");
        let addr = acceptor.local_addr()[0].as_socket_addr().copied().unwrap();
        let app = Route::new().at("/*path", hook).data(inner.clone());
        tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(app));
        Target { inner, url: format!("http://{addr}/hook") }
    }

    /// Answers the next requests with these replies, in order, then the default.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.script.lock().unwrap().extend(replies);
    }

    pub fn set_default(&self, reply: Reply) {
        *self.inner.default.lock().unwrap() = Some(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.inner.requests.lock().unwrap().len()
    }

    /// Every answered request, in the order the answers were sent.
    pub fn spans(&self) -> Vec<Span> {
        self.inner.spans.lock().unwrap().clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    pub async fn wait_count(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.count() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "target got {} of {n} requests in {timeout:?}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.requests()
    }
}

/// A URL on which nothing listens (connection refused).
pub async fn refused_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/hook")
}
