//! End-to-end: hostile documents against the real `standalone` binary. A JSON Patch that
//! copies the document root into itself, and patches that nest a document past what a
//! stored record can decode, are refused while they are applied; the process stays up,
//! its memory stays bounded, the instance stays readable, and another tenant's work goes
//! on. The same entries stay in the log, so a restart (whose start-up sweep re-applies
//! unapplied tails) is shown to be safe too.

mod support;
#[path = "support/client.rs"]
mod support_client;

use std::time::{Duration, Instant};

use pricing_client::types::{EntrySubmission, InstanceDetails, InstanceRequest, ProjectRequest};
use pricing_client::{Client, Error};
use serde_json::{Value, json};
use support::{Service, token};
use support_client::api;

/// Nests `levels` objects: `{"a": {"a": ... 1}}`.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |v, _| json!({ "a": v }))
}

async fn create(client: &Client, project: &str) {
    client
        .create_project(&ProjectRequest::id(project))
        .await
        .expect("project: 201");
    client
        .create_instance(
            project,
            &InstanceRequest {
                meta: Some(json!({"location": {"name": "hall"}})),
                ..InstanceRequest::id("one")
            },
        )
        .await
        .expect("instance: 201");
}

/// Submits `entries` (a JSON array of entries) to the project's instance `one`.
async fn submit(client: &Client, project: &str, entries: Value) -> Result<(), Error> {
    let submission: EntrySubmission =
        serde_json::from_value(json!({ "entries": entries })).expect("entries");
    client
        .submit_entries(project, "one", &submission)
        .await
        .map(|_| ())
}

/// Waits until the instance has applied its whole log; returns its details.
async fn applied(client: &Client, project: &str) -> InstanceDetails {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let details = client
            .instance(project, "one")
            .await
            .unwrap_or_else(|e| panic!("the instance must stay readable: {e}"));
        let p = details.processing;
        if p.applied_sequence == p.last_sequence {
            return details;
        }
        assert!(Instant::now() < deadline, "processing stalled: {p:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn meta(details: &InstanceDetails) -> Value {
    Value::Object(details.instance.meta.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_patches_are_refused_and_hurt_no_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut service = Service::start(&data);
    let attacker_token = token(&data, "attacker");
    let attacker = api(&service.base, &attacker_token);
    let victim = api(&service.base, &token(&data, "victim"));
    create(&attacker, "evil").await;
    create(&victim, "good").await;

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
    submit(&attacker, "evil", json!(bombs))
        .await
        .expect("syntactically valid (200), refused when applied");

    // 2. Depth bomb, direct: an added value too deep for the document is a 400 at submit,
    //    at the value; one that makes the whole body deeper than 64 levels, at the body.
    for (levels, pointer) in [(40, "/entries/0/data/patch/0/value"), (100, "")] {
        let refused = submit(
            &attacker,
            "evil",
            json!([{"type": "instanceMetadata", "data": {"patch": [
                {"op": "add", "path": "/x", "value": nested(levels)}]}}]),
        )
        .await
        .expect_err("a 400");
        let b = refused.problem().expect("a problem");
        assert_eq!(b.status, 400, "{b:?}");
        assert_eq!(b.errors[0].code, "tooDeep", "{b:?}");
        assert_eq!(b.errors[0].pointer, pointer, "{b:?}");
    }

    // 3. Depth bomb through copy (only decidable while applying): 20 levels copied 20
    //    levels down.
    let deep_path: String = (0..20).map(|_| "/a").collect();
    submit(
        &attacker,
        "evil",
        json!([{"type": "instanceMetadata", "transactionId": "deep", "data": {"patch": [
            {"op": "add", "path": "/a", "value": nested(20)},
            {"op": "copy", "from": "/a", "path": format!("/a{deep_path}")}]}}]),
    )
    .await
    .expect("200");

    // The victim's work goes on meanwhile.
    submit(
        &victim,
        "good",
        json!([{"type": "instanceMetadata", "transactionId": "ok",
                "data": {"patch": [{"op": "add", "path": "/location/city", "value": "Berlin"}]}}]),
    )
    .await
    .expect("200");

    let details = applied(&attacker, "evil").await;
    assert_eq!(
        meta(&details),
        json!({"location": {"name": "hall"}}),
        "every hostile patch was rejected whole"
    );
    let details = applied(&victim, "good").await;
    assert_eq!(meta(&details)["location"]["city"], "Berlin");
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
    let attacker = api(&service.base, &attacker_token);
    let details = applied(&attacker, "evil").await;
    assert_eq!(meta(&details), json!({"location": {"name": "hall"}}));
    assert!(service.is_running());
}
