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

/// The budget of the pricing issue: a 10,000-item instance recalculated and stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing; run with --release --ignored --nocapture"]
async fn recalculate_10k_items() {
    use pricing_contract::fixtures::{instance, product};
    use pricing_core::ports::InstanceStore;
    use pricing_core::pricing::Trigger;
    use pricing_core::recalc::{RecalcRequest, recalculate};
    use pricing_core::time::Timestamp;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("t.db")).expect("open");
    let run = Run::new("recalc");
    let key = run.key("p", "big");
    let inst = instance(&key, "big");
    store
        .create_instance(&inst, &header(0, json!({})))
        .await
        .expect("create");
    let mut seq = 0;
    let mut written = 0;
    let per = MAX_COMMIT_RECORDS - 2;
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
                    header: header(seq + 1, json!({})),
                    items,
                    products: if seq == 0 {
                        vec![product("prod", 1)]
                    } else {
                        vec![]
                    },
                    events: vec![],
                },
            )
            .await
            .expect("commit");
        seq += 1;
        written += n;
    }
    // Cold: the whole path from the store.
    let request = RecalcRequest {
        calculation_id: "cold".into(),
        trigger: Trigger::Request,
        metadata: None,
    };
    let t = Instant::now();
    let calc = recalculate(&store, &store, &store, &inst, &request, Timestamp::now())
        .await
        .expect("recalculate")
        .expect("stored");
    println!(
        "recalculate 10,000 items from a cold start: {:?}",
        t.elapsed()
    );
    assert_eq!(calc.prices.len(), 10_000);
    // Warm: as the standalone worker does it (the processor's cached state and prices).
    let processor = pricing_core::process::Processor::new();
    let mut times = Vec::new();
    for round in 0..8 {
        let message = pricing_core::model::Message::Recalculate {
            key: key.clone(),
            calculation_id: format!("c{round}"),
            trigger: Trigger::Request,
            metadata: None,
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        pricing_core::work::handle(&store, &store, &processor, &message, Timestamp::now())
            .await
            .expect("handled");
        if round > 0 {
            times.push(t.elapsed());
        }
    }
    // Where the time goes, step by step.
    {
        use pricing_core::ports::{PriceMatchStore, PriceStore};
        let t = Instant::now();
        let state = store.load_state(&key).await.expect("state");
        let t_state = t.elapsed();
        let t = Instant::now();
        let latest = store
            .latest_prices(&key)
            .await
            .expect("latest")
            .expect("some");
        let t_latest = t.elapsed();
        let t = Instant::now();
        let rules = store.get_matches(&key).await.expect("rules");
        let result = pricing_core::pricing::calculate(
            &state,
            true,
            Trigger::Request,
            Timestamp::now(),
            &latest.price_map(),
            &rules.rules,
        );
        let t_engine = t.elapsed();
        let mut calc = latest.clone();
        calc.calculation_id = "steps".into();
        calc.sequence += 1;
        calc.prices = result.prices;
        let events = pricing_core::recalc::prices_updated_events(&key, &calc);
        let t = Instant::now();
        store
            .save_calculation(&key, &calc, &events)
            .await
            .expect("save");
        let t_save = t.elapsed();
        println!(
            "steps: load_state {t_state:?}, latest_prices {t_latest:?}, engine {t_engine:?}, save {t_save:?}"
        );
    }
    println!(
        "recalculate and store 10,000 items, warm worker (engine, save): median {:?}, min {:?}, max {:?}",
        median(times.clone()),
        times.iter().min().expect("some"),
        times.iter().max().expect("some"),
    );
}
