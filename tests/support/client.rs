//! The end-to-end tests' use of the typed client (`pricing-client`): a client per token and
//! polling until a typed answer holds. Included with `#[path]` by the tests that use it, so
//! the other users of `support` do not need the client crate.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use pricing_client::{Client, RetryPolicy};

/// A client of the service at `base` sending `token`. No retries: the tests see every
/// answer as the service gave it.
pub fn api(base: &str, token: &str) -> Client {
    Client::builder(base)
        .bearer(token)
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .expect("a client")
}

/// Calls `read` until its answer satisfies `done` (30 s at most); every call must succeed.
pub async fn poll<T: std::fmt::Debug, F: Future<Output = pricing_client::Result<T>>>(
    what: &str,
    read: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
) -> T {
    poll_with(what, read, done, false).await
}

/// Like [`poll`], but a 404 counts as "not yet": for a resource the service creates after
/// answering, such as an item whose registration is accepted (200) and applied in the
/// background.
pub async fn poll_found<T: std::fmt::Debug, F: Future<Output = pricing_client::Result<T>>>(
    what: &str,
    read: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
) -> T {
    poll_with(what, read, done, true).await
}

async fn poll_with<T: std::fmt::Debug, F: Future<Output = pricing_client::Result<T>>>(
    what: &str,
    mut read: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
    not_found_is_pending: bool,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pending = match read().await {
            Ok(value) if done(&value) => return value,
            Ok(value) => format!("{value:?}"),
            Err(e) if not_found_is_pending && e.status() == Some(404) => e.to_string(),
            Err(e) => panic!("{what}: {e}"),
        };
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {pending}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
