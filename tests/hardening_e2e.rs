//! End-to-end: hostile documents against the real `standalone` binary. A JSON Patch that
//! copies the document root into itself, and patches that nest a document past what a
//! stored record can decode, are refused while they are applied; the process stays up,
//! its memory stays bounded, the instance stays readable, and another tenant's work goes
//! on. The same entries stay in the log, so a restart (whose start-up sweep re-applies
//! unapplied tails) is shown to be safe too.

mod support;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use support::{Service, send, token};

/// Nests `levels` objects: `{"a": {"a": ... 1}}`.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |v, _| json!({ "a": v }))
}

async fn create(client: &reqwest::Client, base: &str, token: &str, project: &str) {
    let (s, b) = send(
        client,
        Method::POST,
        format!("{base}/projects"),
        token,
        Some(json!({ "projectId": project })),
    )
    .await
    .expect("project");
    assert_eq!(s, 201, "{b}");
    let (s, b) = send(
        client,
        Method::POST,
        format!("{base}/projects/{project}/instances"),
        token,
        Some(json!({"instanceId": "one", "meta": {"location": {"name": "hall"}}})),
    )
    .await
    .expect("instance");
    assert_eq!(s, 201, "{b}");
}

async fn submit(client: &reqwest::Client, url: &str, token: &str, entries: Value) -> (u16, Value) {
    send(
        client,
        Method::POST,
        url.to_owned(),
        token,
        Some(json!({ "entries": entries })),
    )
    .await
    .expect("submit")
}

/// Waits until the instance has applied its whole log; returns its details.
async fn applied(client: &reqwest::Client, url: &str, token: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, details) = send(client, Method::GET, url.to_owned(), token, None)
            .await
            .expect("details");
        assert_eq!(status, 200, "the instance must stay readable: {details}");
        let p = &details["processing"];
        if p["appliedSequence"] == p["lastSequence"] {
            return details;
        }
        assert!(Instant::now() < deadline, "processing stalled: {p}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_patches_are_refused_and_hurt_no_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut service = Service::start(&data);
    let client = reqwest::Client::new();
    let base = service.base.clone();
    let attacker = token(&data, "attacker");
    let victim = token(&data, "victim");
    create(&client, &base, &attacker, "evil").await;
    create(&client, &base, &victim, "good").await;
    let evil = format!("{base}/projects/evil/instances/one");
    let good = format!("{base}/projects/good/instances/one");

    // 1. Amplification: one add, then 40 copies of the root (on the old code 16 copies
    //    built 66 MB and about 25 exhausted memory). A few such entries in one request.
    let mut ops = vec![json!({"op": "add", "path": "/blob", "value": "x".repeat(1_000)})];
    ops.extend((0..40).map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")})));
    let bombs: Vec<Value> = (0..5)
        .map(|i| {
            json!({"type": "instanceMetadata", "transactionId": format!("bomb-{i}"),
                         "data": {"patch": ops.clone()}})
        })
        .collect();
    let (s, b) = submit(&client, &format!("{evil}/entries"), &attacker, json!(bombs)).await;
    assert_eq!(s, 200, "syntactically valid, refused when applied: {b}");

    // 2. Depth bomb, direct: an added value too deep for the document is a 400 at submit.
    let (s, b) = submit(
        &client,
        &format!("{evil}/entries"),
        &attacker,
        json!([{"type": "instanceMetadata", "data": {"patch": [
            {"op": "add", "path": "/x", "value": nested(100)}]}}]),
    )
    .await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["errors"][0]["code"], "tooDeep", "{b}");
    assert_eq!(
        b["errors"][0]["pointer"], "/entries/0/data/patch/0/value",
        "{b}"
    );

    // 3. Depth bomb through copy (only decidable while applying): 20 levels copied 20
    //    levels down.
    let deep_path: String = (0..20).map(|_| "/a").collect();
    let (s, b) = submit(
        &client,
        &format!("{evil}/entries"),
        &attacker,
        json!([{"type": "instanceMetadata", "transactionId": "deep", "data": {"patch": [
            {"op": "add", "path": "/a", "value": nested(20)},
            {"op": "copy", "from": "/a", "path": format!("/a{deep_path}")}]}}]),
    )
    .await;
    assert_eq!(s, 200, "{b}");

    // The victim's work goes on meanwhile.
    let (s, b) = submit(
        &client,
        &format!("{good}/entries"),
        &victim,
        json!([{"type": "instanceMetadata", "transactionId": "ok",
                "data": {"patch": [{"op": "add", "path": "/location/city", "value": "Berlin"}]}}]),
    )
    .await;
    assert_eq!(s, 200, "{b}");

    let details = applied(&client, &evil, &attacker).await;
    assert_eq!(
        details["meta"],
        json!({"location": {"name": "hall"}}),
        "every hostile patch was rejected whole"
    );
    let details = applied(&client, &good, &victim).await;
    assert_eq!(details["meta"]["location"]["city"], "Berlin");
    assert!(service.is_running(), "the process stays up");
    let peak = service.peak_rss();
    assert!(
        peak < 200 * 1024 * 1024,
        "peak RSS {} MB: a patch must not build a large document",
        peak / (1024 * 1024)
    );

    // A restart re-reads the same log (and its start-up sweep) without harm.
    service.kill9();
    let mut service = Service::start(&data);
    let base = service.base.clone();
    let evil = format!("{base}/projects/evil/instances/one");
    let details = applied(&client, &evil, &attacker).await;
    assert_eq!(details["meta"], json!({"location": {"name": "hall"}}));
    assert!(service.is_running());
}
