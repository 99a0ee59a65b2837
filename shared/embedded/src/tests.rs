#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pricing_contract::fixtures::{Run, header, instance, item, new_entry, process};
use pricing_core::model::AppendOutcome;
use pricing_core::ports::{Commit, EntryLog, InstanceStore, StateStore, StoreError, WorkQueue};
use serde_json::json;

use super::*;

fn file_store() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("data/pricing.db")).unwrap();
    (dir, store)
}

#[tokio::test]
async fn everything_survives_a_reopen() {
    let (dir, store) = file_store();
    let path = store.path().unwrap().to_path_buf();
    let run = Run::new("reopen");
    let key = run.key("p", "i");
    store
        .create_instance(&instance(&key, "I"), &header(0, json!({"a": 1})))
        .await
        .unwrap();
    let out = store
        .append(&key, vec![new_entry(Some("t1"), 1), new_entry(None, 2)])
        .await
        .unwrap();
    assert_eq!(out.len(), 2);
    store
        .commit(
            &key,
            Commit {
                expected_applied: 0,
                header: header(2, json!({"a": 2})),
                items: vec![item("x", "p", 3, 2)],
                products: Vec::new(),
                events: Vec::new(),
            },
        )
        .await
        .unwrap();
    store.send(&process(&key)).await.unwrap();
    let clone = store.clone();
    drop(store);
    drop(clone);

    let store = EmbeddedStore::open(&path).unwrap();
    let records = store.read(&key, 0, 10).await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].jwt, new_entry(Some("t1"), 1).jwt);
    assert_eq!(store.last_sequence(&key).await.unwrap(), 2);
    assert_eq!(
        store
            .append(&key, vec![new_entry(Some("t1"), 3)])
            .await
            .unwrap(),
        vec![AppendOutcome::Duplicate { sequence: 1 }],
        "dedupe survives a reopen"
    );
    let state = store.load_state(&key).await.unwrap();
    assert_eq!(state.header.applied_seq, 2);
    assert_eq!(state.items.len(), 1);
    let got = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got.len(), 1, "queued messages survive a reopen");
    assert_eq!(got[0].message, process(&key));
    drop(dir);
}

#[tokio::test]
async fn uses_wal_and_the_chosen_durability() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    for (durability, level) in [(Durability::ProcessCrash, 1), (Durability::PowerLoss, 2)] {
        let store = EmbeddedStore::open_with(&path, durability).unwrap();
        let writer = lock(&store.inner.writer);
        let mode: String = writer
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = writer
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(sync, level);
    }
}

#[test]
fn refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    drop(EmbeddedStore::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", db::SCHEMA_VERSION + 1)
            .unwrap();
    }
    let err = EmbeddedStore::open(&path).unwrap_err();
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn busy_and_locked_are_unavailable() {
    let busy =
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY), None);
    assert!(matches!(
        DbError::from(busy).into_store("op"),
        StoreError::Unavailable(m) if m.starts_with("op: ")
    ));
    let locked = rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_LOCKED),
        None,
    );
    assert!(matches!(
        DbError::from(locked).into_store("op"),
        StoreError::Unavailable(_)
    ));
    let other = rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
        None,
    );
    assert!(matches!(
        DbError::from(other).into_store("append"),
        StoreError::Failed(m) if m.starts_with("append: ")
    ));
}

#[tokio::test]
async fn a_writer_in_another_process_is_unavailable_not_failed() {
    let (_dir, store) = file_store();
    let path = store.path().unwrap().to_path_buf();
    // Hold the write lock from another connection, with a short busy timeout on ours.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    lock(&store.inner.writer)
        .busy_timeout(Duration::from_millis(50))
        .unwrap();
    let key = Run::new("busy").key("p", "i");
    let r = store.append(&key, vec![new_entry(None, 1)]).await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    other.execute_batch("ROLLBACK").unwrap();
    assert!(store.append(&key, vec![new_entry(None, 1)]).await.is_ok());
}

#[tokio::test]
async fn reads_see_writes_across_connections() {
    let (_dir, store) = file_store();
    let key = Run::new("rw").key("p", "i");
    let mut tasks = Vec::new();
    for t in 0..4 {
        let store = store.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..25 {
                let out = store
                    .append(&key, vec![new_entry(Some(&format!("{t}-{n}")), n)])
                    .await
                    .unwrap();
                let AppendOutcome::Accepted { sequence } = out[0] else {
                    panic!("accepted")
                };
                // Read-your-writes through a reader connection.
                assert!(store.last_sequence(&key).await.unwrap() >= sequence);
                assert_eq!(
                    store.read(&key, sequence - 1, 1).await.unwrap()[0].sequence,
                    sequence
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(store.last_sequence(&key).await.unwrap(), 100);
}

/// Appends entries one call at a time and prints each acknowledged sequence; killed by
/// `acknowledged_entries_survive_kill_9`. Does nothing unless that test started it.
#[tokio::test]
async fn crash_child() {
    let Ok(path) = std::env::var("PRICING_EMBEDDED_CRASH_DB") else {
        return;
    };
    let store = EmbeddedStore::open(Path::new(&path)).unwrap();
    let key = crash_key();
    for n in 0.. {
        let out = store
            .append(&key, vec![new_entry(Some(&format!("t{n}")), n)])
            .await
            .unwrap();
        if let AppendOutcome::Accepted { sequence } = out[0] {
            println!("acked {sequence}");
        }
    }
}

fn crash_key() -> pricing_core::ids::InstanceKey {
    pricing_core::ids::InstanceKey::new(
        pricing_core::ids::ProjectId::parse("crash").unwrap(),
        pricing_core::ids::InstanceId::parse("i").unwrap(),
    )
}

/// Ends the child process even when the test fails half way.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn acknowledged_entries_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PRICING_EMBEDDED_CRASH_DB", &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut last_acked = 0u64;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("acked ") {
            last_acked = n.trim().parse().unwrap();
            if last_acked >= 300 {
                break;
            }
        }
    }
    // SIGKILL: no destructors, no checkpoint, no flush.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(last_acked >= 300);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(&path).unwrap();
        let key = crash_key();
        let last = store.last_sequence(&key).await.unwrap();
        assert!(
            last >= last_acked,
            "every acknowledged append survives: acked {last_acked}, found {last}"
        );
        let records = store.read(&key, 0, 100_000).await.unwrap();
        assert!(
            records
                .iter()
                .enumerate()
                .all(|(n, r)| r.sequence == n as u64 + 1)
        );
    });
}

#[tokio::test]
async fn receive_is_oldest_first_across_groups() {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let run = Run::new("order");
    let keys: Vec<_> = (0..4).map(|n| run.key("p", &format!("i{n}"))).collect();
    for k in &keys {
        store.send(&process(k)).await.unwrap();
    }
    let got = store.receive(2, Duration::from_secs(30)).await.unwrap();
    let messages: Vec<_> = got.iter().map(|r| r.message.clone()).collect();
    assert_eq!(messages, vec![process(&keys[0]), process(&keys[1])]);
    let got = store.receive(10, Duration::from_secs(30)).await.unwrap();
    let messages: Vec<_> = got.iter().map(|r| r.message.clone()).collect();
    assert_eq!(messages, vec![process(&keys[2]), process(&keys[3])]);
    assert!(
        store
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn visibility_expiry_redelivers_with_count_two() {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let key = Run::new("vis").key("p", "i");
    store.send(&process(&key)).await.unwrap();
    let first = store.receive(10, Duration::from_millis(100)).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].receive_count, 1);
    assert!(
        store
            .receive(10, Duration::from_millis(100))
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The expired receipt no longer acts on the message.
    store.ack(&first[0].receipt).await.unwrap();
    store
        .retry_later(&first[0].receipt, Duration::from_secs(60))
        .await
        .unwrap();
    let second = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        second.len(),
        1,
        "the expired receipt neither deleted nor hid it"
    );
    assert_eq!(second[0].receive_count, 2);
    assert_ne!(second[0].receipt, first[0].receipt);
    store.ack(&second[0].receipt).await.unwrap();
    let rows: i64 = lock(&store.inner.writer)
        .query_row("SELECT COUNT(*) FROM queue", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "ack deletes the row");
}

#[tokio::test]
async fn a_group_in_flight_hands_out_nothing() {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let run = Run::new("lock");
    let (k1, k2) = (run.key("p", "a"), run.key("p", "b"));
    store.send(&process(&k1)).await.unwrap();
    let a = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(a.len(), 1);
    // Same group again (not merged: the first was received), and another group.
    store.send(&process(&k1)).await.unwrap();
    store.send(&process(&k2)).await.unwrap();
    let got = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got.len(), 1, "only the free group");
    assert_eq!(got[0].message, process(&k2));
    // Parked behind a retry delay, the group stays locked.
    store
        .retry_later(&a[0].receipt, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(
        store
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let again = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].receive_count, 2,
        "the older message of the group first"
    );
    store.ack(&again[0].receipt).await.unwrap();
    let next = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].receive_count, 1);
    assert_eq!(next[0].message, process(&k1));
}

#[tokio::test]
async fn a_message_that_does_not_decode_is_parked() {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let key = Run::new("park").key("p", "i");
    lock(&store.inner.writer)
        .execute(
            "INSERT INTO queue (message_group, dedupe_key, body, sent_at, visible_at)
             VALUES ('g', ?1, '{\"kind\":\"fromTheFuture\"}', 0, 0)",
            [process(&key).dedupe_key()],
        )
        .unwrap();
    assert!(
        store
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    store.send(&process(&key)).await.unwrap();
    let got = store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        got.len(),
        1,
        "the good message is delivered, not merged into the parked one"
    );
    assert_eq!(got[0].message, process(&key));
    assert!(
        store
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn wait_for_work_wakes_on_send_and_on_expiry() {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let run = Run::new("wait");
    // Nothing queued: waits the whole time.
    let t = Instant::now();
    store.wait_for_work(Duration::from_millis(100)).await;
    assert!(t.elapsed() >= Duration::from_millis(90));

    // A send from another task wakes the waiter early.
    let sender = store.clone();
    let key = run.key("p", "i");
    let k = key.clone();
    let t = Instant::now();
    let task = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        sender.send(&process(&k)).await.unwrap();
    });
    store.wait_for_work(Duration::from_secs(10)).await;
    assert!(t.elapsed() < Duration::from_secs(5), "woken by the send");
    task.await.unwrap();

    // Work waiting: returns at once.
    let t = Instant::now();
    store.wait_for_work(Duration::from_secs(10)).await;
    assert!(t.elapsed() < Duration::from_secs(5));

    // Only an in-flight message: returns when its visibility runs out.
    let got = store.receive(10, Duration::from_millis(200)).await.unwrap();
    assert_eq!(got.len(), 1);
    let t = Instant::now();
    store.wait_for_work(Duration::from_secs(10)).await;
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(
        store
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn the_wal_is_checkpointed_in_the_background() {
    let (_dir, store) = file_store();
    let path = store.path().unwrap().to_path_buf();
    let key = Run::new("ckpt").key("p", "i");
    let before = std::fs::metadata(&path).unwrap().len();
    let entries = (0..500)
        .map(|n| pricing_core::model::NewEntry {
            jwt: "x".repeat(1000),
            ..new_entry(None, n)
        })
        .collect();
    store.append(&key, entries).await.unwrap();
    // The writer does not checkpoint a WAL this small itself.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), before);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&path).unwrap().len() <= before {
        assert!(Instant::now() < deadline, "no checkpoint within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn release_in_flight_hands_messages_out_again_at_once() {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let run = Run::new("release");
    let key = run.key("p", "i");
    store.send(&process(&key)).await.unwrap();
    let first = store.receive(1, Duration::from_secs(600)).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        store
            .receive(1, Duration::from_secs(600))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.release_in_flight().await.unwrap(), 1);
    let again = store.receive(1, Duration::from_secs(600)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].receive_count, 2);
    // The old receipt is stale: acknowledging it does nothing.
    store.ack(&first[0].receipt).await.unwrap();
    store.ack(&again[0].receipt).await.unwrap();
    assert!(
        store
            .receive(1, Duration::from_secs(600))
            .await
            .unwrap()
            .is_empty()
    );
}
