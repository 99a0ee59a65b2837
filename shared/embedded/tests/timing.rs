//! Rough timings of the hot paths; ignored by default (they assert nothing about speed).
//! `cargo test --release -p pricing-embedded --test timing -- --ignored --nocapture`

use std::time::{Duration, Instant};

use pricing_contract::fixtures::{Run, header, item, new_entry};
use pricing_core::model::NewEntry;
use pricing_core::ports::{Commit, EntryLog, MAX_COMMIT_RECORDS, StateStore};
use pricing_embedded::EmbeddedStore;
use serde_json::json;

/// The standalone's allocator (functions/standalone, feature `mimalloc`, on by default), so
/// these are the standalone's timings: with glibc's malloc, allocation and freeing were
/// about a fifth of the samples of `recalculate_10k_items`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// `load_state` of a 10,000-item instance alone, for profiles (`valgrind
/// --tool=callgrind`): `LOADS` loads (default 20) after the state is written and loaded
/// once, so the cost of one load is the difference between a run with `LOADS=n` and one
/// with `LOADS=0`, divided by n. Items as the fixture writes them (`item`); those with sales (6 in 7) also
/// carry the sales statistics the apply step keeps (units, amount paid, 20 bins of each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing; run with --release --ignored --nocapture"]
async fn load_state_10k() {
    let loads: usize = std::env::var("LOADS").map_or(20, |v| v.parse().expect("LOADS"));
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("t.db")).expect("open");
    let key = Run::new("load").key("p", "state");
    let per = MAX_COMMIT_RECORDS - 1;
    let (mut written, mut seq) = (0usize, 0u64);
    while written < 10_000 {
        let n = per.min(10_000 - written);
        let items = (written..written + n)
            .map(|i| {
                let sold = i as u64 % 7;
                let mut item = item(&format!("item-{i:05}"), "prod", sold, seq + 1);
                for s in 0..sold {
                    let tau = (i as u64 * 13 + s * 29) % 100;
                    item.demand
                        .record(1, 40.0 + s as f64 * 0.75, Some(tau as f64 / 100.0), 42.125);
                }
                item
            })
            .collect();
        let commit = Commit {
            expected_applied: seq,
            header: header(seq + 1, json!({})),
            items,
            products: Vec::new(),
            events: Vec::new(),
        };
        store.commit(&key, commit).await.expect("commit");
        written += n;
        seq += 1;
    }
    let conn = rusqlite::Connection::open(dir.path().join("t.db")).expect("open");
    let stored: i64 = conn
        .query_row("SELECT sum(length(record)) FROM state_items", [], |r| {
            r.get(0)
        })
        .expect("stored bytes");
    let state = store.load_state(&key).await.expect("load_state");
    let json: usize = state
        .items
        .values()
        .map(|i| serde_json::to_string(i).expect("json").len())
        .sum();
    drop(state);
    println!("item records: {stored} B stored, {json} B as JSON");
    let mut times = Vec::new();
    for _ in 0..loads {
        let t = Instant::now();
        let state = store.load_state(&key).await.expect("load_state");
        times.push(t.elapsed());
        assert_eq!(state.items.len(), 10_000);
    }
    if loads > 0 {
        println!(
            "load_state of 10,000 items ({loads} loads): median {:?}, min {:?}, max {:?}",
            median(times.clone()),
            times.iter().min().expect("some"),
            times.iter().max().expect("some")
        );
    }
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
    let path = dir.path().join("t.db");
    println!(
        "stored by the first calculation: {}",
        stored_bytes(&path, 1)
    );
    // More cold recalculations (state, latest prices and rules from the store each time),
    // a second apart: most prices stay as they were.
    let mut cold = Vec::new();
    for round in 0..5 {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let request = RecalcRequest {
            calculation_id: format!("cold-{round}"),
            trigger: Trigger::Request,
            metadata: None,
        };
        let t = Instant::now();
        let calc = recalculate(&store, &store, &store, &inst, &request, Timestamp::now())
            .await
            .expect("recalculate")
            .expect("stored");
        cold.push(t.elapsed());
        if round == 0 {
            println!(
                "stored by a recalculation: {}",
                stored_bytes(&path, calc.sequence)
            );
        }
    }
    println!(
        "cold recalculation of 10,000 items: median {:?}, min {:?}, max {:?}",
        median(cold.clone()),
        cold.iter().min().expect("some"),
        cold.iter().max().expect("some")
    );
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
    // Where the time goes, step by step, a second after the last calculation as in the
    // cold rounds (memory freed since then is given back to the system and faulted in
    // again: docs/performance.md, "The allocator's purge delay").
    {
        use pricing_core::ports::{PriceMatchStore, PriceStore};
        tokio::time::sleep(Duration::from_millis(1_000)).await;
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
        let t = Instant::now();
        let events = pricing_core::recalc::prices_updated_events(&key, &calc);
        let t_events = t.elapsed();
        let t = Instant::now();
        store
            .save_calculation(&key, &calc, &events)
            .await
            .expect("save");
        let t_save = t.elapsed();
        println!(
            "steps: load_state {t_state:?}, latest_prices {t_latest:?}, engine {t_engine:?}, \
             prices.updated events {t_events:?}, save {t_save:?}"
        );
    }
    println!(
        "recalculate and store 10,000 items, warm worker (engine, save): median {:?}, min {:?}, max {:?}",
        median(times.clone()),
        times.iter().min().expect("some"),
        times.iter().max().expect("some"),
    );
}

/// What the calculation of sequence `seq` stored (the latest snapshot is the current
/// one, replaced by each calculation; the events are its `prices.updated` parts).
fn stored_bytes(path: &std::path::Path, seq: u64) -> String {
    let conn = rusqlite::Connection::open(path).expect("open");
    let seq = i64::try_from(seq).expect("seq");
    let (rows, history): (i64, i64) = conn
        .query_row(
            "SELECT count(*), coalesce(sum(length(record) + length(item_id)), 0)
             FROM price_history WHERE seq = ?1",
            [seq],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("history");
    let latest: i64 = conn
        .query_row(
            "SELECT (SELECT sum(length(record)) FROM price_latest)
                  + (SELECT coalesce(sum(length(record)), 0) FROM price_latest_chunks)",
            [],
            |r| r.get(0),
        )
        .expect("latest");
    let calc: i64 = conn
        .query_row(
            "SELECT length(record) FROM price_calculations WHERE seq = ?1",
            [seq],
            |r| r.get(0),
        )
        .expect("calculation");
    let (events, event_bytes): (i64, i64) = conn
        .query_row(
            "SELECT count(*), coalesce(sum(length(record)), 0) FROM events
             WHERE json_extract(record, '$.data.sequence') = ?1",
            [seq],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("events");
    format!(
        "history {rows} rows / {history} B, latest snapshot {latest} B (replaced), \
         calculation row {calc} B, prices.updated {events} events / {event_bytes} B; \
         kept per calculation: {} B",
        history + calc + event_bytes
    )
}

/// A receiver that answers 204 at once.
struct Accepting;

impl pricing_core::ports::WebhookTransport for Accepting {
    async fn post(
        &self,
        _request: pricing_core::ports::WebhookRequest,
    ) -> pricing_core::webhooks::delivery::Response {
        pricing_core::webhooks::delivery::Response::Status {
            status: 204,
            retry_after: None,
        }
    }
}

/// Webhook deliveries through the webhooks lane as the standalone workers run them: 32
/// workers, each receiving up to 16 messages and handling each with
/// `pricing_core::webhooks::handle` (get_delivery, get_subscription, a signed request to
/// a receiver that answers 204 at once, record_attempt), then acknowledging it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "timing; run with --release --ignored --nocapture"]
async fn webhook_deliveries() {
    use pricing_contract::fixtures::{at, delivery, subscription};
    use pricing_core::jws::{Signer, StoredKey};
    use pricing_core::model::Message;
    use pricing_core::ports::{DeliveryStore, SubscriptionStore, WorkQueue};
    use pricing_core::time::Timestamp;
    use pricing_core::webhooks::{Settle, handle};

    const DELIVERIES: usize = 20_000;
    const WORKERS: usize = 32;
    const BATCH: usize = 16;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("t.db")).expect("open");
    let run = Run::new("timing");
    let key = run.key("p", "i");
    let now = Timestamp::now();
    let sub = subscription(
        run.subscription_id("s"),
        &key.project(),
        None,
        at("2026-01-01T00:00:00Z"),
    );
    assert!(store.create_subscription(&sub, 20).await.expect("create"));
    let signer = std::sync::Arc::new(
        Signer::from_keys(&[StoredKey::generate("k1".into(), now).expect("key")]).expect("signer"),
    );

    let t = Instant::now();
    let all: Vec<_> = (0..DELIVERIES)
        .map(|n| delivery(&key, &sub, &format!("evt-{n}"), now))
        .collect();
    for chunk in all.chunks(100) {
        store
            .create_deliveries(chunk)
            .await
            .expect("create_deliveries");
    }
    let created = t.elapsed();
    let t = Instant::now();
    for d in &all {
        store
            .send(&Message::Deliver {
                webhook_id: d.webhook_id.clone(),
            })
            .await
            .expect("send");
    }
    println!(
        "{DELIVERIES} deliveries: created in batches of 100 in {created:?}, sent one by one in {:?}",
        t.elapsed()
    );

    let queue = store.webhook_queue();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (store, queue, signer, done) =
                (store.clone(), queue.clone(), signer.clone(), done.clone());
            tokio::spawn(async move {
                while done.load(std::sync::atomic::Ordering::Relaxed) < DELIVERIES {
                    let got = queue
                        .receive(BATCH, Duration::from_secs(60))
                        .await
                        .expect("receive");
                    if got.is_empty() {
                        queue.wait_for_work(Duration::from_millis(50)).await;
                        continue;
                    }
                    for r in got {
                        let settle = handle(
                            &store,
                            &queue,
                            &Accepting,
                            &signer,
                            &r.message,
                            Timestamp::now(),
                        )
                        .await
                        .expect("handle");
                        assert_eq!(settle, Settle::Done);
                        queue.ack(&r.receipt).await.expect("ack");
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
    let elapsed = t.elapsed();
    println!(
        "{DELIVERIES} deliveries by {WORKERS} workers (receive {BATCH}, handle, ack): {elapsed:?}, {:.0}/s",
        DELIVERIES as f64 / elapsed.as_secs_f64()
    );
    let sample = store
        .get_delivery(&all[DELIVERIES / 2].webhook_id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(sample.attempt, 1);
}
