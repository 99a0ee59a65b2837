//! A request answered before its body was read ends its connection, and says so with
//! `Connection: close`; one whose body was read keeps it (raw HTTP/1.1 on one socket).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

mod common;

/// Starts the service; returns it (killed on drop), its address (HOST:PORT) and a token.
async fn service(dir: &std::path::Path) -> (tokio::process::Child, String, String) {
    let data = dir.join("data");
    let token = common::token(&data, "keep");
    let (server, base) = common::serve(&data).await;
    let addr = base.trim_start_matches("http://").to_owned();
    (server, addr, token)
}

/// Reads one response (headers and a Content-Length body): its status line and headers,
/// lower-cased.
async fn response(stream: &mut BufReader<TcpStream>) -> (String, Vec<String>) {
    let mut status = String::new();
    stream.read_line(&mut status).await.unwrap();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        headers.push(line);
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    (status.trim_end().to_owned(), headers)
}

fn post(path: &str, token: &str, body: &str) -> (String, String) {
    (
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ),
        body.to_owned(),
    )
}

#[tokio::test]
async fn an_answer_given_before_the_body_was_read_says_connection_close() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, token) = service(dir.path()).await;
    let mut stream = BufReader::new(TcpStream::connect(&addr).await.unwrap());

    // A request whose body is read: the connection stays, and says nothing of closing.
    let (head, body) = post("/projects", &token, r#"{"projectId":"p"}"#);
    stream.get_mut().write_all(head.as_bytes()).await.unwrap();
    stream.get_mut().write_all(body.as_bytes()).await.unwrap();
    let (status, headers) = response(&mut stream).await;
    assert!(status.contains(" 201 "), "{status}");
    assert!(
        !headers.iter().any(|h| h == "connection: close"),
        "{headers:?}"
    );

    // A refused token with its small body sent along: the rest is read, and the
    // connection kept (hyper would have drained it too).
    let (head, body) = post("/projects", "not-a-token", r#"{"projectId":"r"}"#);
    stream
        .get_mut()
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    let (status, headers) = response(&mut stream).await;
    assert!(status.contains(" 401 "), "{status}");
    assert!(
        !headers.iter().any(|h| h == "connection: close"),
        "{headers:?}"
    );
    stream
        .get_mut()
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (status, _) = response(&mut stream).await;
    assert!(
        status.contains(" 200 "),
        "the connection serves on: {status}"
    );

    // A refused token, the body still on its way: answered, and closing.
    let (head, body) = post("/projects", "not-a-token", r#"{"projectId":"q"}"#);
    stream.get_mut().write_all(head.as_bytes()).await.unwrap();
    let (status, headers) = response(&mut stream).await;
    assert!(status.contains(" 401 "), "{status}");
    assert!(
        headers.iter().any(|h| h == "connection: close"),
        "{headers:?}"
    );
    // The service closes it: the rest of the body is not read as a request.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stream.get_mut().write_all(body.as_bytes()).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?} {rest:?}");

    // A route that does not exist answers before the body too.
    let mut stream = BufReader::new(TcpStream::connect(&addr).await.unwrap());
    let (head, _) = post("/no/such/route", &token, r#"{"x":1}"#);
    stream.get_mut().write_all(head.as_bytes()).await.unwrap();
    let (status, headers) = response(&mut stream).await;
    assert!(status.contains(" 404 "), "{status}");
    assert!(
        headers.iter().any(|h| h == "connection: close"),
        "{headers:?}"
    );
}

/// A client that waits for `100 Continue` before sending a body the service refuses (too
/// large, or a refused token) gets the refusal, not `100 Continue` first: reading what was
/// left of the body asked the client for it (an outside probe saw `100 Continue` before the
/// 413 of a 6 MB `Content-Length`).
#[tokio::test]
async fn a_refusal_does_not_ask_for_the_body_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, token) = service(dir.path()).await;
    for (token, length, refused) in [
        (token.as_str(), 6 * 1024 * 1024, " 413 "),
        ("not-a-token", 100, " 401 "),
    ] {
        let mut stream = BufReader::new(TcpStream::connect(&addr).await.unwrap());
        let head = format!(
            "POST /projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {length}\r\n\r\n"
        );
        stream.get_mut().write_all(head.as_bytes()).await.unwrap();
        let (status, headers) = response(&mut stream).await;
        assert!(status.contains(refused), "{status}");
        assert!(
            headers.iter().any(|h| h == "connection: close"),
            "{headers:?}"
        );
    }
}
