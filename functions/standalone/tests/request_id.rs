//! Tracing on the standalone (issue 13, item 4): the id of a request is in the
//! `x-request-id` response header and on every log line about the request, the caller's
//! own id when it sent a plain one.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

#[tokio::test]
async fn a_requests_id_is_in_its_answer_and_its_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = common::token(&data, "acme");
    let mut child = Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("RUST_LOG", "info,pricing_api=debug")
        .env("LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let logs = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = logs.clone();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let base = loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the service exited"
        );
        if let Some(a) = line.trim().strip_prefix("listening on ") {
            break a.to_owned();
        }
    };
    std::thread::spawn(move || for _ in stdout.lines() {});

    let client = reqwest::Client::new();
    let created = client
        .post(format!("{base}/projects"))
        .bearer_auth(&token)
        .header("x-request-id", "smoke-trace-42")
        .json(&json!({"projectId": "traced"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(created.headers()["x-request-id"], "smoke-trace-42");
    let made_up = client
        .get(format!("{base}/projects/traced"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let made_up = made_up.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(made_up.len(), 26, "a ULID: {made_up}");

    // Every line logged about each request carries its id (the `request` span).
    let lines_of = |id: &str| -> Vec<Value> {
        logs.lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| {
                v["spans"]
                    .as_array()
                    .is_some_and(|spans| spans.iter().any(|s| s["request_id"].as_str() == Some(id)))
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while (lines_of("smoke-trace-42").len() < 2 || lines_of(&made_up).is_empty())
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let created_lines = lines_of("smoke-trace-42");
    let messages: Vec<&str> = created_lines
        .iter()
        .filter_map(|v| v["fields"]["message"].as_str())
        .collect();
    assert!(
        messages.contains(&"project created") && messages.contains(&"request"),
        "the handler's line and the access line carry the id: {messages:?}"
    );
    assert!(!lines_of(&made_up).is_empty());

    // The token endpoint, beside the API's routes, is traced the same way (it had no id).
    let refused = client
        .post(format!("{base}/oauth2/token"))
        .header("x-request-id", "oauth-trace-7")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials&client_id=nobody&client_secret=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["x-request-id"], "oauth-trace-7");
    let deadline = Instant::now() + Duration::from_secs(30);
    while lines_of("oauth-trace-7").len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let oauth_lines = lines_of("oauth-trace-7");
    assert!(
        oauth_lines
            .iter()
            .any(|v| v["fields"]["client_id"] == "nobody"),
        "the refusal names the client: {oauth_lines:?}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
