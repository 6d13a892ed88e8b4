//! The controller's clock: now, and a sleep that may have no end.

/// Now, Unix seconds.
pub(crate) fn now_secs() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Sleeps until `deadline`; without one, forever (a `select!` arm that never fires).
pub(crate) async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
