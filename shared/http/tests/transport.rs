//! The transport against a real HTTP receiver on loopback.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pricing_core::ports::{WebhookRequest, WebhookTransport};
use pricing_core::webhooks::CallbackPolicy;
use pricing_core::webhooks::delivery::Response;
use pricing_http::{HttpTransport, USER_AGENT};
use support::Receiver;

/// http allowed, private addresses not: what is refused is the address, not the scheme.
const PUBLIC_ONLY: CallbackPolicy = CallbackPolicy {
    allow_http: true,
    allow_private: false,
};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn request(url: String) -> WebhookRequest {
    WebhookRequest {
        url,
        headers: vec![("content-type", "application/json".to_owned())],
        body: br#"{"type":"prices.updated"}"#.to_vec(),
    }
}

fn local() -> HttpTransport {
    HttpTransport::new(CallbackPolicy::LOCAL).expect("transport")
}

/// A transport whose resolver answers `ips` for every name, counting the lookups.
fn resolving_to(policy: CallbackPolicy, ips: Vec<IpAddr>) -> (HttpTransport, Arc<AtomicUsize>) {
    let lookups = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&lookups);
    let transport = HttpTransport::builder(policy)
        .lookup(move |_host| {
            counter.fetch_add(1, Ordering::SeqCst);
            let ips = ips.clone();
            async move { Ok(ips) }
        })
        .build()
        .expect("transport");
    (transport, lookups)
}

fn status(status: u16) -> Response {
    Response::Status {
        status,
        retry_after: None,
    }
}

fn error(response: &Response) -> &str {
    match response {
        Response::Error(why) => why,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_2xx_is_returned_with_its_status() {
    let (addr, receiver) = Receiver::start().await;
    let response = local().post(request(format!("http://{addr}/ok"))).await;
    assert_eq!(response, status(200));
    assert_eq!(receiver.seen().len(), 1);
}

#[tokio::test]
async fn gone_and_other_statuses_are_returned_as_they_are() {
    let (addr, _receiver) = Receiver::start().await;
    let transport = local();
    let gone = transport.post(request(format!("http://{addr}/gone"))).await;
    assert_eq!(gone, status(410));
    let missing = transport
        .post(request(format!("http://{addr}/nothing")))
        .await;
    assert_eq!(missing, status(404));
}

#[tokio::test]
async fn retry_after_is_passed_through_verbatim() {
    let (addr, _receiver) = Receiver::start().await;
    let response = local().post(request(format!("http://{addr}/busy"))).await;
    assert_eq!(
        response,
        Response::Status {
            status: 429,
            retry_after: Some("Wed, 21 Oct 2026 07:28:00 GMT".into()),
        }
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (addr, receiver) = Receiver::start().await;
    let response = local()
        .post(request(format!("http://{addr}/redirect")))
        .await;
    assert_eq!(response, status(302));
    let paths: Vec<String> = receiver
        .seen()
        .into_iter()
        .map(|s| s.path_and_query)
        .collect();
    assert_eq!(paths, ["/redirect"]);
}

#[tokio::test]
async fn no_response_in_time_is_an_error() {
    let (addr, _receiver) = Receiver::start().await;
    let transport = HttpTransport::builder(CallbackPolicy::LOCAL)
        .timeout(Duration::from_millis(300))
        .build()
        .expect("transport");
    let response = transport.post(request(format!("http://{addr}/slow"))).await;
    assert_eq!(error(&response), "timed out after 300ms");
}

#[tokio::test]
async fn resolving_and_connecting_have_their_own_shorter_timeout() {
    let transport = HttpTransport::builder(CallbackPolicy::LOCAL)
        .connect_timeout(Duration::from_millis(200))
        .lookup(|_host| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(vec![LOOPBACK])
        })
        .build()
        .expect("transport");
    let response = transport
        .post(request("http://hooks.example.com/ok".into()))
        .await;
    assert_eq!(error(&response), "connect timed out after 200ms");
}

#[tokio::test]
async fn a_refused_connection_is_an_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    let response = local().post(request(format!("http://{addr}/ok"))).await;
    assert_eq!(error(&response), "connection refused");
}

#[tokio::test]
async fn tls_to_a_plain_http_receiver_is_a_tls_error() {
    let (addr, _receiver) = Receiver::start().await;
    let response = local().post(request(format!("https://{addr}/ok"))).await;
    let why = error(&response);
    assert!(why.starts_with("TLS: "), "{why}");
}

#[tokio::test]
async fn strict_policies_refuse_loopback_literals_before_sending() {
    let (addr, receiver) = Receiver::start().await;
    for policy in [PUBLIC_ONLY, CallbackPolicy::STRICT] {
        let transport = HttpTransport::new(policy).expect("transport");
        for scheme in ["http", "https"] {
            let response = transport
                .post(request(format!("{scheme}://{addr}/ok")))
                .await;
            let why = error(&response);
            assert!(why.starts_with("callback URL refused"), "{why}");
        }
    }
    assert!(receiver.seen().is_empty());
}

#[tokio::test]
async fn a_public_name_resolving_to_loopback_is_refused_at_connect_time() {
    let (addr, receiver) = Receiver::start().await;
    let port = addr.port();
    let (transport, lookups) = resolving_to(PUBLIC_ONLY, vec![LOOPBACK]);
    let response = transport
        .post(request(format!("http://hooks.example.com:{port}/ok")))
        .await;
    assert_eq!(
        error(&response),
        "refused: hooks.example.com resolves to 127.0.0.1, which is not a public address"
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);

    // One private address among public ones is enough (rebinding).
    let public = IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34));
    let (transport, _) = resolving_to(CallbackPolicy::STRICT, vec![public, LOOPBACK]);
    let response = transport
        .post(request(format!("https://hooks.example.com:{port}/ok")))
        .await;
    let why = error(&response);
    assert!(
        why.starts_with("refused: hooks.example.com resolves to 127.0.0.1"),
        "{why}"
    );

    assert!(receiver.seen().is_empty());
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_an_error() {
    let transport = HttpTransport::builder(CallbackPolicy::STRICT)
        .lookup(|_host| async { Err(std::io::Error::other("no such host")) })
        .build()
        .expect("transport");
    let response = transport
        .post(request("https://hooks.example.com/in".into()))
        .await;
    assert_eq!(
        error(&response),
        "could not resolve hooks.example.com: no such host"
    );
}

#[tokio::test]
async fn the_local_policy_allows_loopback_and_connects_to_the_resolved_address() {
    let (addr, receiver) = Receiver::start().await;
    let response = local().post(request(format!("http://{addr}/ok"))).await;
    assert_eq!(response, status(200));
    // hooks.example.com reaches the receiver only through the injected address.
    let (transport, lookups) = resolving_to(CallbackPolicy::LOCAL, vec![LOOPBACK]);
    let port = addr.port();
    let response = transport
        .post(request(format!("http://hooks.example.com:{port}/ok")))
        .await;
    assert_eq!(response, status(200));
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].headers.get("host").map(|h| h.as_bytes()),
        Some(format!("hooks.example.com:{port}").as_bytes())
    );
}

#[tokio::test]
async fn headers_and_body_arrive_unchanged() {
    let (addr, receiver) = Receiver::start().await;
    let body: Vec<u8> = br#"{"id":"01J","data":{"price":"12.50"}}"#
        .iter()
        .copied()
        .chain([0, 0xff, b'\n'])
        .collect();
    let headers = vec![
        ("content-type", "application/json".to_owned()),
        ("Date", "Sun, 22 Nov 2026 10:00:00 GMT".to_owned()),
        ("x-signature-secp256r1-sha256", "3045022100ab".to_owned()),
        ("x-signature-key-id", "key-2026-11".to_owned()),
        ("webhook-id", "wh_01JABCDEF".to_owned()),
        ("webhook-timestamp", "1795341600".to_owned()),
    ];
    let response = local()
        .post(WebhookRequest {
            url: format!("http://{addr}/ok?project=p1&x=%2F"),
            headers: headers.clone(),
            body: body.clone(),
        })
        .await;
    assert_eq!(response, status(200));
    let seen = receiver.seen();
    let [got] = seen.as_slice() else {
        panic!("one request, got {seen:?}")
    };
    assert_eq!(got.path_and_query, "/ok?project=p1&x=%2F");
    assert_eq!(got.body.as_ref(), body.as_slice());
    for (name, value) in &headers {
        let values: Vec<&[u8]> = got
            .headers
            .get_all(*name)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(values, [value.as_bytes()], "{name}");
    }
    assert_eq!(
        got.headers.get("user-agent").map(|h| h.as_bytes()),
        Some(USER_AGENT.as_bytes())
    );
    assert!(USER_AGENT.starts_with("dynamic-pricing-webhooks/"));
}

#[tokio::test]
async fn deliveries_to_one_host_reuse_the_connection() {
    let (addr, receiver) = Receiver::start().await;
    let transport = local();
    for _ in 0..3 {
        let response = transport.post(request(format!("http://{addr}/ok"))).await;
        assert_eq!(response, status(200));
    }
    let peers: Vec<SocketAddr> = receiver.seen().into_iter().map(|s| s.peer).collect();
    assert_eq!(peers.len(), 3);
    assert!(peers.iter().all(|p| *p == peers[0]), "{peers:?}");
}

#[tokio::test]
async fn a_large_response_body_is_not_read_and_the_status_stands() {
    let (addr, receiver) = Receiver::start().await;
    let transport = local();
    let response = transport.post(request(format!("http://{addr}/big"))).await;
    assert_eq!(response, status(200));
    // The connection with the unread body is dropped; the next request gets a new one.
    let response = transport.post(request(format!("http://{addr}/ok"))).await;
    assert_eq!(response, status(200));
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_ne!(seen[0].peer, seen[1].peer);
}

#[tokio::test]
async fn an_invalid_header_value_is_an_error_and_nothing_is_sent() {
    let (addr, receiver) = Receiver::start().await;
    let response = local()
        .post(WebhookRequest {
            url: format!("http://{addr}/ok"),
            headers: vec![("webhook-id", "a\r\nb".to_owned())],
            body: vec![],
        })
        .await;
    assert_eq!(error(&response), "invalid value for header webhook-id");
    assert!(receiver.seen().is_empty());
}
