//! Rough timings of the hot paths; ignored by default (they assert nothing about speed).
//! `cargo test --release -p pricing-embedded --test timing -- --ignored --nocapture`

use std::time::{Duration, Instant};

use pricing_contract::fixtures::{Run, header, item, new_entry};
use pricing_core::model::NewEntry;
use pricing_core::ports::{Commit, EntryLog, MAX_COMMIT_RECORDS, StateStore};
use pricing_embedded::EmbeddedStore;
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing; run with --release --ignored --nocapture"]
async fn timings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("t.db")).expect("open");
    let run = Run::new("timing");

    // 500-entry appends of ~600-byte entries into a log that keeps growing.
    let key = run.key("p", "log");
    let mut times = Vec::new();
    for round in 0..40 {
        let entries: Vec<NewEntry> = (0..500)
            .map(|n| NewEntry {
                jwt: format!("{}{}", new_entry(None, n).jwt, "x".repeat(560)),
                ..new_entry(Some(&format!("r{round}-{n}")), n)
            })
            .collect();
        let t = Instant::now();
        store.append(&key, entries).await.expect("append");
        times.push(t.elapsed());
    }
    println!(
        "append 500 entries: median {:?}, min {:?}, max {:?} (log of 20,000 entries)",
        median(times.clone()),
        times.iter().min().expect("some"),
        times.iter().max().expect("some")
    );

    let t = Instant::now();
    let mut after = 0;
    loop {
        let page = store.read(&key, after, 500).await.expect("read");
        match page.last() {
            Some(r) => after = r.sequence,
            None => break,
        }
    }
    println!("read 20,000 entries in pages of 500: {:?}", t.elapsed());

    // A 10,000-item state, written in commits of MAX_COMMIT_RECORDS.
    let key = run.key("p", "state");
    let per = MAX_COMMIT_RECORDS - 1;
    let mut written = 0usize;
    let mut seq = 0u64;
    let t = Instant::now();
    while written < 10_000 {
        let n = per.min(10_000 - written);
        let items = (written..written + n)
            .map(|i| item(&format!("item-{i:05}"), "prod", i as u64 % 7, seq + 1))
            .collect();
        store
            .commit(
                &key,
                Commit {
                    expected_applied: seq,
                    header: header(seq + 1, json!({"name": "timing"})),
                    items,
                    products: Vec::new(),
                    events: Vec::new(),
                },
            )
            .await
            .expect("commit");
        written += n;
        seq += 1;
    }
    println!(
        "commit: {seq} commits of up to {MAX_COMMIT_RECORDS} records: {:?} ({:?} each)",
        t.elapsed(),
        t.elapsed() / seq as u32
    );
    let mut times = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let state = store.load_state(&key).await.expect("load_state");
        times.push(t.elapsed());
        assert_eq!(state.items.len(), 10_000);
    }
    println!(
        "load_state of 10,000 items: median {:?}, min {:?}",
        median(times.clone()),
        times.iter().min().expect("some")
    );
    let t = Instant::now();
    for _ in 0..1000 {
        store
            .applied_sequence(&key)
            .await
            .expect("applied_sequence");
    }
    println!("applied_sequence: {:?} each", t.elapsed() / 1000);
}
