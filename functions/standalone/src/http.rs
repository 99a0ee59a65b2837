//! The HTTP listener: the router on hyper's HTTP/1 server, with a header read timeout.
//!
//! `axum::serve` gives hyper no timer, so hyper's header read timeout never runs: a
//! client that opens connections and sends nothing, or sends its headers a byte a minute,
//! holds each connection (a file descriptor and a task) for as long as it likes, and
//! enough of them stop the service from accepting anyone. Here hyper has a timer: a
//! connection whose next request's headers have not all arrived within the timeout
//! (counted from when the connection opens, or from when its previous response went out)
//! is closed. A body that stalls is the handler's to time out (408, `Limits::body_timeout`).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// How long a shutdown waits for requests in flight before it stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in
/// flight finish (closing idle connections at once) for at most [`SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                // A client that went away, or sent no complete headers in time.
                tracing::debug!(error = %e, "connection closed");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_secs = SHUTDOWN_GRACE.as_secs(),
            "requests still in flight at shutdown were cut off"
        );
    }
}

/// A failed accept: the client's own failure is skipped; any other (out of file
/// descriptors, say) is logged and waited out for a second instead of spinning.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; trying again in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
