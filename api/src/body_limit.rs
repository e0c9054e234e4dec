//! The request body limit (`Config::max_body_bytes`, 1 MiB; docs/contract.md,
//! "Limits"). A declared Content-Length over the limit is refused before
//! reading; a chunked body is read up to the limit and refused past it.
//! Requests without a body pass untouched (poem's own SizeLimit would demand a
//! Content-Length even on a GET).

use poem::http::StatusCode;
use poem::{Body, Endpoint, Request};

pub async fn limit_body<E: Endpoint>(next: E, mut req: Request, max: usize) -> poem::Result<E::Output> {
    let too_large = || {
        poem::Error::from_string(format!("the request body is larger than {max} bytes"), StatusCode::PAYLOAD_TOO_LARGE)
    };
    let declared =
        req.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > max as u64 => return Err(too_large()),
        Some(_) => {}
        None if req.headers().contains_key("transfer-encoding") => {
            let bytes = req.take_body().into_bytes_limit(max).await.map_err(|_| too_large())?;
            req.set_body(Body::from(bytes));
        }
        None => {}
    }
    next.call(req).await
}
