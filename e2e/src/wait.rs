//! Polling until something holds.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// How often conditions are polled: well below any timeout a test uses, well above the
/// cost of one GET against a local apiserver.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Polls `f` until it returns `Some`, for at most `timeout`; the error names `desc`.
pub async fn wait_for<T, F, Fut>(desc: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    try_wait_for(desc, timeout, || {
        let fut = f();
        async move { Ok::<_, std::convert::Infallible>(fut.await) }
    })
    .await
}

/// Like [`wait_for`], for checks that can fail (an API call): errors are retried like
/// `None`, and the last one is part of the timeout error.
pub async fn try_wait_for<T, E, F, Fut>(desc: &str, timeout: Duration, mut f: F) -> Result<T>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
{
    let start = Instant::now();
    loop {
        let last_error = match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        if start.elapsed() >= timeout {
            match last_error {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {desc} (last error: {e})")
                }
                None => bail!("timed out after {timeout:?} waiting for {desc}"),
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
