//! A webhook receiver on loopback that records what it is sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

/// A request the receiver got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The client's end of the connection: the same for requests on one connection.
    pub peer: SocketAddr,
}

#[derive(Clone, Default)]
pub struct Receiver {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Receiver {
    /// Serves on 127.0.0.1 and an ephemeral port; runs until the test's runtime ends.
    pub async fn start() -> (SocketAddr, Receiver) {
        let receiver = Receiver::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("the receiver's address");
        let app = Router::new()
            .fallback(answer)
            .with_state(receiver.clone())
            .into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, receiver)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("receiver lock").clone()
    }
}

/// Answers by path: /ok, /gone, /busy, /redirect, /slow, /big; anything else 404.
async fn answer(
    State(receiver): State<Receiver>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    receiver.seen.lock().expect("receiver lock").push(Seen {
        path_and_query: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers,
        body,
        peer,
    });
    match uri.path() {
        "/ok" => (StatusCode::OK, "thanks").into_response(),
        "/gone" => StatusCode::GONE.into_response(),
        "/busy" => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "Wed, 21 Oct 2026 07:28:00 GMT")],
        )
            .into_response(),
        "/redirect" => (StatusCode::FOUND, [(header::LOCATION, "/ok")]).into_response(),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            StatusCode::OK.into_response()
        }
        "/big" => (StatusCode::OK, vec![b'x'; 1 << 20]).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}
