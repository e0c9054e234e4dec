//! The request body limit (`Config::max_body_bytes`, 1 MiB; docs/contract.md,
//! "Limits"). A declared Content-Length over the limit is refused before
//! reading; a chunked body is read up to the limit and refused past it.
//! Requests without a body pass untouched (poem's own SizeLimit would demand a
//! Content-Length even on a GET). A body is read whole here, within
//! [`BODY_TIMEOUT`] (408 past it), so a client that trickles its body cannot
//! hold a handler.

use poem::error::ReadBodyError;
use poem::http::StatusCode;
use poem::{Body, Endpoint, Request};

use crate::slow_clients::BODY_TIMEOUT;

pub async fn limit_body<E: Endpoint>(next: E, mut req: Request, max: usize) -> poem::Result<E::Output> {
    let too_large = || {
        poem::Error::from_string(format!("the request body is larger than {max} bytes"), StatusCode::PAYLOAD_TOO_LARGE)
    };
    let declared =
        req.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let has_body = match declared {
        Some(n) if n > max as u64 => return Err(too_large()),
        Some(n) => n > 0,
        None => req.headers().contains_key("transfer-encoding"),
    };
    if has_body {
        let read = tokio::time::timeout(BODY_TIMEOUT, req.take_body().into_bytes_limit(max));
        let bytes = read
            .await
            .map_err(|_| {
                poem::Error::from_string(
                    format!("the request body did not arrive within {} seconds", BODY_TIMEOUT.as_secs()),
                    StatusCode::REQUEST_TIMEOUT,
                )
            })?
            .map_err(|e| match e {
                ReadBodyError::PayloadTooLarge => too_large(),
                other => poem::Error::from_string(
                    format!("the request body could not be read: {other}"),
                    StatusCode::BAD_REQUEST,
                ),
            })?;
        req.set_body(Body::from(bytes));
    }
    next.call(req).await
}
