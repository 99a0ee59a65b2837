//! The HTTP listener: the router on hyper's HTTP/1 server, with a header read timeout and
//! a send timeout.
//!
//! `axum::serve` gives hyper no timer, so hyper's header read timeout never runs: a
//! client that opens connections and sends nothing, or sends its headers a byte a minute,
//! holds each connection (a file descriptor and a task) for as long as it likes, and
//! enough of them stop the service from accepting anyone. Here hyper has a timer: a
//! connection whose next request's headers have not all arrived within the timeout
//! (counted from when the connection opens, or from when its previous response went out)
//! is closed. A body that stalls is the handler's to time out (408, `Limits::body_timeout`).
//! A response the client stops reading (a large listing asked for and never read) holds
//! its connection only until a write has made no progress for the send timeout: then the
//! connection is closed.
//!
//! A request answered before its body was read whole (refused by the rate limit or the
//! token check, or a route that does not exist) ends its connection unless the rest of
//! the body can be read at once. The answer then says `Connection: close` (RFC 9112
//! section 9.6), so that a keep-alive client sends its next request (a retry after
//! `Retry-After`) on a new connection instead of one that is closing (an outside review
//! saw broken pipes after 429s).
//!
//! And a cap on the connections served at once, below the process's file descriptor limit:
//! at the cap the listener stops accepting (new clients wait in the kernel's backlog) until
//! a connection closes, so clients can never take the descriptors the service needs for
//! its own work (its database files, webhook deliveries). Before the cap, an outside probe
//! held 19,900 connections on a machine whose limit is 20,000.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How often the connection cap's warning may be logged.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How long a shutdown waits for requests in flight (and for connections still sending a
/// request's headers) before it closes them. Short: a container runtime usually allows 10 s
/// in all before it kills the process, and the workers are stopped after this.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Descriptors kept from the cap on client connections (see [`default_max_connections`]):
/// the database's files, webhook deliveries in flight, the `/metrics` listener's clients.
const RESERVED_DESCRIPTORS: usize = 512;

/// The default cap on client connections: the process's file descriptor limit (its soft
/// limit, from `/proc/self/limits`; 1,024, the usual default, where that cannot be read)
/// less [`RESERVED_DESCRIPTORS`], and at least 64.
pub fn default_max_connections() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| open_files_limit(&limits))
        .unwrap_or(1_024);
    soft.saturating_sub(RESERVED_DESCRIPTORS).max(64)
}

/// The soft limit of "Max open files" in the text of `/proc/PID/limits`.
fn open_files_limit(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    match line.split_whitespace().nth(3)? {
        "unlimited" => Some(usize::MAX),
        n => n.parse().ok(),
    }
}

/// How a listener serves.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// See the module documentation.
    pub header_timeout: Duration,
    /// How long a response's write may make no progress (the client reads nothing) before
    /// the connection is closed.
    pub send_timeout: Duration,
    /// Connections served at once (at least 1).
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in
/// flight finish (closing idle connections at once) for at most [`SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let router = router.layer(axum::middleware::from_fn(close_unread));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let graceful = GracefulShutdown::new();
    let mut connections = tokio::task::JoinSet::new();
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut warned = None;
    loop {
        let slot = match open.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                // Said once a minute at most: a flood reaches the cap again and again.
                if warned.is_none_or(|at: std::time::Instant| at.elapsed() >= WARN_EVERY) {
                    warned = Some(std::time::Instant::now());
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection limit reached: new connections wait until one closes"
                    );
                }
                tokio::select! {
                    slot = open.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => tokio::select! {
                () = accept_failed(&e) => continue,
                () = &mut shutdown => break,
            },
        };
        let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.send_timeout));
        let service = TowerToHyperService::new(router.clone());
        let connection =
            graceful.watch(builder.serve_connection(TokioIo::new(Box::pin(stream)), service));
        // Finished connections are reaped as new ones come (a JoinSet keeps their results).
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let _slot = slot;
            if let Err(e) = connection.await {
                // A client that went away, sent no complete headers in time, or stopped
                // reading its response.
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
            connections = connections.len(),
            grace_secs = SHUTDOWN_GRACE.as_secs(),
            "connections still open at shutdown were closed"
        );
        connections.shutdown().await;
    }
}

/// Answers a request whose body was not read to its end with `Connection: close`, unless
/// what is left of it arrives at once: a refusal that did not read a small body sent with
/// its headers (hyper itself would drain that and keep the connection) reads the rest, up
/// to [`DRAIN_BYTES`] within [`DRAIN_WAIT`], and keeps the connection when that reaches
/// its end. It reads nothing when the client waits for `100 Continue` before sending the
/// body (reading would ask for the body the answer refuses), nor when the declared length
/// is over what it would read: those answers close the connection at once.
async fn close_unread(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let waits_for_continue = parts
        .headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
    let too_long = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > DRAIN_BYTES as u64);
    let unread = Arc::new(Unread::default());
    let body = Body::new(Tracked {
        inner: Some(body),
        unread: unread.clone(),
    });
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if !unread.read.load(Ordering::Relaxed) {
        let left = unread.left.lock().ok().and_then(|mut l| l.take());
        let drained = match left {
            Some(body) if !waits_for_continue && !too_long => drain(body).await,
            _ => false,
        };
        if !drained {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    response
}

/// The most of an unread body [`close_unread`] reads to keep a connection.
const DRAIN_BYTES: usize = 64 * 1024;
/// How long [`close_unread`] waits for the rest of an unread body.
const DRAIN_WAIT: Duration = Duration::from_millis(50);

/// Whether `body` reaches its end within [`DRAIN_BYTES`] and [`DRAIN_WAIT`].
async fn drain(mut body: Body) -> bool {
    let read_all = async {
        let mut bytes = 0usize;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let Ok(frame) = frame else {
                return false;
            };
            bytes += frame.data_ref().map_or(0, |d| d.len());
            if bytes > DRAIN_BYTES {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_WAIT, read_all)
        .await
        .unwrap_or(false)
}

/// What [`Tracked`] tells [`close_unread`]: whether the body was read to its end, and the
/// body itself when the handler let it go unread.
#[derive(Default)]
struct Unread {
    read: AtomicBool,
    left: std::sync::Mutex<Option<Body>>,
}

/// A request body that says when it has been read to its end, and hands itself back when
/// dropped before.
struct Tracked {
    inner: Option<Body>,
    unread: Arc<Unread>,
}

impl HttpBody for Tracked {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || inner.is_end_stream() {
            self.unread.read.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.unread.read.load(Ordering::Relaxed)
            && let Some(body) = self.inner.take()
            && let Ok(mut left) = self.unread.left.lock()
        {
            *left = Some(body);
        }
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

#[cfg(test)]
mod tests {
    use super::open_files_limit;

    #[test]
    fn the_open_files_limit_is_read_from_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63432                63432                processes \n\
                      Max open files            20000                524288               files     \n";
        assert_eq!(open_files_limit(limits), Some(20_000));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(open_files_limit(unlimited), Some(usize::MAX));
        assert_eq!(open_files_limit("Max processes 1 1 processes\n"), None);
    }
}
