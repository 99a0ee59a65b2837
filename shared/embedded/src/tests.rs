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

/// Schema version 9: item records written as JSON before it are rewritten in the binary
/// form on open and load as they were; a JSON record that is left (it did not decode then,
/// or is written by hand) still reads, and one that does not decode is refused on load.
#[tokio::test]
async fn item_records_in_json_are_rewritten_in_the_binary_form() {
    let (_dir, store) = file_store();
    let path = store.path().unwrap().to_path_buf();
    let key = Run::new("v9").key("p", "i");
    let mut sold = item("sold", "p", 3, 2);
    sold.demand.record(3, 40.5, Some(0.3), 42.0);
    let items = vec![item("a", "p", 0, 1), sold];
    let commit = Commit {
        expected_applied: 0,
        header: header(2, json!({})),
        items: items.clone(),
        products: Vec::new(),
        events: Vec::new(),
    };
    store.commit(&key, commit).await.unwrap();
    let before = store.load_state(&key).await.unwrap();
    assert_eq!(before.items.values().cloned().collect::<Vec<_>>(), items);
    drop(store);
    // The database as version 8 wrote it: JSON item records.
    let kinds = |conn: &rusqlite::Connection| -> Vec<String> {
        conn.prepare("SELECT typeof(record) FROM state_items ORDER BY item_id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(kinds(&conn), ["blob", "blob"]);
        for i in &items {
            conn.execute(
                "UPDATE state_items SET record = ?2 WHERE item_id = ?1",
                rusqlite::params![i.item_id.as_str(), serde_json::to_string(i).unwrap()],
            )
            .unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        assert_eq!(kinds(&conn), ["text", "text"]);
    }
    let store = EmbeddedStore::open(&path).unwrap();
    assert_eq!(store.load_state(&key).await.unwrap(), before);
    drop(store);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(kinds(&conn), ["blob", "blob"], "rewritten");
        assert_eq!(
            conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
                .unwrap(),
            db::SCHEMA_VERSION
        );
        // A JSON record among binary ones still reads.
        conn.execute(
            "UPDATE state_items SET record = ?1 WHERE item_id = 'a'",
            [serde_json::to_string(&items[0]).unwrap()],
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(&path).unwrap();
    assert_eq!(store.load_state(&key).await.unwrap(), before);
    drop(store);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE state_items SET record = X'0105' WHERE item_id = 'a'",
            [],
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(&path).unwrap();
    let err = store.load_state(&key).await.unwrap_err().to_string();
    assert!(err.contains("does not decode"), "{err}");
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

/// `open_read_only` (what `simulate log` opens) reads a database of this build's schema and
/// changes nothing: an older file is refused as it is (not upgraded), a newer one too, a
/// missing one is not created, and every write fails.
#[tokio::test]
async fn a_read_only_store_reads_and_changes_nothing() {
    let (dir, store) = file_store();
    let path = store.path().unwrap().to_path_buf();
    let run = Run::new("read-only");
    let key = run.key("p", "i");
    store
        .create_instance(&instance(&key, "I"), &header(0, json!({"a": 1})))
        .await
        .unwrap();
    drop(store);
    let bytes = || std::fs::read(&path).unwrap();
    let version = || {
        rusqlite::Connection::open(&path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
            .unwrap()
    };

    let beside = |suffix: &str| {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        std::path::PathBuf::from(p)
    };
    // The store's last connection (its checkpointer's, which notices the drop within its
    // interval) deletes the log as it closes.
    for _ in 0..100 {
        if !beside("-wal").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!beside("-wal").exists(), "the store closed its log");
    let before = bytes();
    let reader = EmbeddedStore::open_read_only(&path, true).unwrap();
    assert_eq!(
        reader.get_instance(&key).await.unwrap().map(|i| i.name),
        Some("I".to_owned())
    );
    let err = reader
        .create_instance(&instance(&run.key("p", "j"), "J"), &header(0, json!({})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("readonly"), "{err}");
    drop(reader);
    assert!(bytes() == before, "the file changed");
    assert!(
        !beside("-wal").exists() && !beside("-shm").exists(),
        "nothing made beside a database no process has open"
    );
    // A file of no schema: said to be no database of this service.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = EmbeddedStore::open_read_only(&empty, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a database of this service"), "{err}");

    for (older, word) in [
        (db::SCHEMA_VERSION - 3, "older"),
        (db::SCHEMA_VERSION + 1, "newer"),
    ] {
        rusqlite::Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", older)
            .unwrap();
        let before = bytes();
        let err = EmbeddedStore::open_read_only(&path, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains(word), "{err}");
        assert_eq!(version(), older, "not upgraded");
        assert!(bytes() == before, "the file changed");
    }

    let missing = dir.path().join("none.db");
    assert!(matches!(
        EmbeddedStore::open_read_only(&missing, true),
        Err(EmbeddedError::Missing { .. })
    ));
    assert!(!missing.exists());
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
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
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
    // The writer does not checkpoint a WAL this small itself (wal_autocheckpoint is
    // `WRITER_CHECKPOINT_PAGES`); the background connection copies it into the file.
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

mod prices {
    use std::time::Duration;

    use pricing_contract::fixtures::{
        Run, calculated, calculation, event, header, instance, item_id, item_price, kept,
        price_match, process, project,
    };
    use pricing_core::model::{PageRequest, PriceCalculation};
    use pricing_core::ports::{
        EventStore, InstanceStore, MatchSet, PriceMatchStore, PriceStore, ProjectStore, StateStore,
        StoreError, WorkQueue,
    };
    use pricing_core::pricing::{PriceStatus, Trigger};
    use pricing_core::recalc::prices_updated_events;
    use serde_json::json;

    use super::{EmbeddedStore, db, file_store};
    use crate::prices::LATEST_CHUNK;
    use pricing_core::model::StoredPriceRef;

    fn page(cursor: Option<&str>, limit: usize) -> PageRequest {
        PageRequest {
            cursor: cursor.map(str::to_owned),
            limit,
        }
    }

    /// Creates `inst` (at `key`) with `items` of the product `prod` applied through
    /// sequence 1.
    async fn instance_with_items(
        store: &EmbeddedStore,
        key: &pricing_core::ids::InstanceKey,
        inst: &pricing_core::model::Instance,
        items: Vec<pricing_core::state::ItemState>,
    ) {
        store
            .create_instance(inst, &header(0, json!({})))
            .await
            .unwrap();
        let commit = pricing_core::ports::Commit {
            expected_applied: 0,
            header: header(1, json!({})),
            items,
            products: vec![pricing_contract::fixtures::product("prod", 1)],
            events: Vec::new(),
        };
        store.commit(key, commit).await.unwrap();
    }

    /// `n` prices of items `seat-00000`..., every tenth kept, with explanations.
    fn big_calculation(id: &str, sequence: u64, n: u64) -> PriceCalculation {
        let prices = (0..n)
            .map(|i| {
                let price = 20.0 + (i % 40) as f64 * 0.5 + sequence as f64;
                let status = if i % 10 == 0 {
                    PriceStatus::Kept
                } else {
                    PriceStatus::Calculated
                };
                item_price(&format!("seat-{i:05}"), price, Some(price - 1.0), status)
            })
            .collect();
        calculation(id, sequence, Trigger::Schedule, prices)
    }

    /// The latest prices read back as the calculation without explanations (kept prices,
    /// first prices, unchanged and changed ones, metadata), small and large (chunks of
    /// `LATEST_CHUNK`, fewer after more); a record written by an earlier version, its
    /// prices inline (compact or whole), reads back the same way, whole and in pages, and
    /// the next calculation replaces it.
    #[tokio::test]
    async fn the_latest_prices_read_back_without_explanations() {
        let mut with_metadata = big_calculation("calc-m", 3, 5);
        with_metadata.metadata = Some(json!({"a": [1, 2], "b": {"c": "d"}}));
        let mixed = calculation(
            "calc-x",
            4,
            Trigger::Request,
            vec![
                calculated("a", 9.5, None),
                calculated("b", 9.5, Some(9.5)),
                calculated("c", 9.5, Some(9.0)),
                kept("d", 3.0),
            ],
        );
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("latest").key("p", "i");
        for c in [
            big_calculation("calc-0", 1, 0),
            big_calculation("calc-big", 2, 2_500),
            with_metadata,
            mixed,
            big_calculation("calc-1", 5, 1),
            big_calculation("calc-big2", 6, 1_000),
        ] {
            assert!(store.save_calculation(&key, &c, &[]).await.unwrap());
            assert_eq!(
                store.latest_prices(&key).await.unwrap(),
                Some(c.without_explanations())
            );
            let chunks: i64 = super::lock(&store.inner.writer)
                .query_row("SELECT count(*) FROM price_latest_chunks", [], |r| r.get(0))
                .unwrap();
            assert_eq!(chunks as usize, c.prices.len().div_ceil(LATEST_CHUNK));
        }

        // Records of an earlier version: the compact prices inline, or whole `ItemPrice`s.
        let c = big_calculation("calc-old", 1, 1_500);
        let stored: Vec<_> = c.prices.iter().map(StoredPriceRef::of).collect();
        let inline = json!({
            "calculationId": c.calculation_id, "trigger": c.trigger, "calculatedAt": c.calculated_at,
            "sequence": 1, "prices": [], "stored": stored,
        });
        for record in [inline.to_string(), serde_json::to_string(&c).unwrap()] {
            let store = EmbeddedStore::open_in_memory().unwrap();
            super::lock(&store.inner.writer)
                .execute(
                    "INSERT INTO price_latest (project_id, instance_id, seq, record)
                     VALUES (?1, ?2, 1, ?3)",
                    rusqlite::params![
                        key.project_storage_key(),
                        key.instance_id.to_string(),
                        record
                    ],
                )
                .unwrap();
            assert_eq!(
                store.latest_prices(&key).await.unwrap(),
                Some(c.without_explanations())
            );
            let page = store
                .latest_prices_page(&key, 995, 10)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(page.total, 1_500);
            let ids: Vec<String> = page.prices.iter().map(|(i, _)| i.to_string()).collect();
            assert_eq!(
                ids,
                (995..1_005)
                    .map(|i| format!("seat-{i:05}"))
                    .collect::<Vec<_>>()
            );
            let next = big_calculation("calc-new", 2, 3);
            assert!(store.save_calculation(&key, &next, &[]).await.unwrap());
            assert_eq!(
                store.latest_prices(&key).await.unwrap(),
                Some(next.without_explanations())
            );
        }

        let unchanged = [calculated("seat-00001", 9.5, Some(9.5))];
        let stored: Vec<_> = unchanged.iter().map(StoredPriceRef::of).collect();
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            r#"[{"i":"seat-00001","p":9.5}]"#,
            "an unchanged price is its item and price"
        );
    }

    /// A recalculation returns (and stores) explanations only on its history entries:
    /// the first calculation's prices all changed and are explained; the same calculation
    /// again a moment later changes none and carries none.
    #[tokio::test]
    async fn a_recalculation_keeps_explanations_only_where_the_price_changed() {
        use pricing_contract::fixtures::item;
        use pricing_core::model::is_history_entry;
        use pricing_core::pricing::Explanation;
        use pricing_core::recalc::{RecalcRequest, recalculate};
        use pricing_core::time::Timestamp;

        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("explained").key("p", "i");
        let inst = instance(&key, "i");
        let items = (0..5)
            .map(|i| item(&format!("seat-{i}"), "prod", i, 1))
            .collect();
        instance_with_items(&store, &key, &inst, items).await;
        let now = Timestamp::parse("2026-03-01T12:00:00Z").unwrap();
        let mut explained = Vec::new();
        for id in ["c1", "c2"] {
            let request = RecalcRequest {
                calculation_id: id.into(),
                trigger: Trigger::Request,
                metadata: None,
            };
            let calc = recalculate(&store, &store, &store, &inst, &request, now)
                .await
                .unwrap()
                .expect("calculated");
            for p in &calc.prices {
                assert_eq!(
                    p.explanation != Explanation::default(),
                    is_history_entry(p),
                    "{id}: {p:?}"
                );
            }
            explained.push(calc.prices.iter().filter(|p| is_history_entry(p)).count());
        }
        assert_eq!(explained, vec![5, 0]);
    }

    /// Past its deactivation date an instance is not priced again (INTERFACE.md: the
    /// absolute end of its pricing), also by a request queued before it or a sales trigger:
    /// the worker makes no calculation (an outside review found one made after it).
    #[tokio::test]
    async fn a_deactivated_instance_is_not_priced_by_a_queued_request() {
        use pricing_contract::fixtures::item;
        use pricing_core::model::Message;
        use pricing_core::ports::PriceStore;
        use pricing_core::process::Processor;
        use pricing_core::time::Timestamp;
        use pricing_core::work::{Handled, handle};

        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("deactivated").key("p", "i");
        let mut inst = instance(&key, "i");
        inst.active = false;
        inst.deactivation_date = Timestamp::parse("2020-01-01T00:00:00Z");
        instance_with_items(&store, &key, &inst, vec![item("seat", "prod", 0, 1)]).await;
        for trigger in [Trigger::Request, Trigger::Sales] {
            let message = Message::Recalculate {
                key: key.clone(),
                calculation_id: format!("c-{trigger:?}"),
                trigger,
                metadata: None,
            };
            let handled = handle(
                &store,
                &store,
                &Processor::new(),
                &message,
                Timestamp::now(),
            )
            .await
            .unwrap();
            assert!(matches!(handled, Handled::Deactivated { .. }), "{handled}");
        }
        assert!(store.latest_prices(&key).await.unwrap().is_none());
    }

    /// An instance that is not active gets no scheduled calculation asked for before it was
    /// turned off (such a run prices only active instances' items: it published every item
    /// as kept, an empty `prices.updated`), while a request and a sales run still price its
    /// items (INTERFACE.md gives the flag to scheduled pricing only; a sales run prices the
    /// items inside their dynamic pricing periods).
    #[tokio::test]
    async fn an_inactive_instance_gets_no_scheduled_calculation_but_sales_and_requested_ones() {
        use pricing_contract::fixtures::item;
        use pricing_core::model::Message;
        use pricing_core::ports::PriceStore;
        use pricing_core::process::Processor;
        use pricing_core::time::Timestamp;
        use pricing_core::work::{Handled, handle};

        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("inactive").key("p", "i");
        let mut inst = instance(&key, "i");
        inst.active = false;
        instance_with_items(&store, &key, &inst, vec![item("seat", "prod", 0, 1)]).await;
        let ask = |trigger: Trigger| Message::Recalculate {
            key: key.clone(),
            calculation_id: format!("c-{trigger:?}"),
            trigger,
            metadata: None,
        };
        let processor = Processor::new();
        // Inside the fixture item's sales period (its dynamic pricing period).
        let now = Timestamp::parse("2026-03-01T00:00:00Z").unwrap();
        let handled = handle(&store, &store, &processor, &ask(Trigger::Schedule), now)
            .await
            .unwrap();
        assert!(matches!(handled, Handled::Inactive { .. }), "{handled}");
        assert!(store.latest_prices(&key).await.unwrap().is_none());
        for trigger in [Trigger::Sales, Trigger::Request] {
            let handled = handle(&store, &store, &processor, &ask(trigger), now)
                .await
                .unwrap();
            assert!(matches!(handled, Handled::Calculated { .. }), "{handled}");
            // It priced the item (not kept for the instance's being inactive).
            let latest = store.latest_prices(&key).await.unwrap().unwrap();
            assert_eq!(latest.trigger, trigger);
            assert!(
                latest
                    .prices
                    .iter()
                    .all(|p| p.status == pricing_core::pricing::PriceStatus::Calculated),
                "{latest:?}"
            );
        }
    }

    /// The sales calculation a crossing asks for is asked once: the recalculator (on AWS
    /// another function, with a processor of its own) does not ask for the one it is
    /// handling again, and a cold processor that finds the mark of a calculation stored
    /// since does not either (a review found both re-sending it).
    #[tokio::test]
    async fn a_sales_calculation_is_asked_for_once() {
        use pricing_core::jws::{Signer, StoredKey};
        use pricing_core::model::{Message, NewEntry};
        use pricing_core::ports::{Enqueue, EntryLog, StoreResult};
        use pricing_core::process::Processor;
        use pricing_core::time::Timestamp;
        use pricing_core::work::{Handled, handle};
        use std::sync::Mutex;

        #[derive(Default)]
        struct Sent(Mutex<Vec<Message>>);
        impl Enqueue for Sent {
            async fn send(&self, message: &Message) -> StoreResult<()> {
                self.0.lock().unwrap().push(message.clone());
                Ok(())
            }
        }
        impl Sent {
            fn sales(&self) -> Vec<String> {
                self.0
                    .lock()
                    .unwrap()
                    .iter()
                    .filter_map(|m| match m {
                        Message::Recalculate { calculation_id, .. } => Some(calculation_id.clone()),
                        _ => None,
                    })
                    .collect()
            }
        }

        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("asked-once").key("p", "i");
        let mut inst = instance(&key, "i");
        inst.active = true;
        store
            .create_instance(&inst, &header(0, json!({})))
            .await
            .unwrap();
        let now = Timestamp::now();
        let signer = Signer::from_keys(&[StoredKey::generate("k".into(), now).unwrap()]).unwrap();
        let entries = [
            json!({"type": "productRegistration", "data": {"productId": "P", "capacity": 10,
                "recalculation": {"soldPercentStep": 10}}}),
            json!({"type": "itemRegistration", "data": {"itemId": "A", "productId": "P",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 90, "default": 40}}}),
            json!({"type": "itemSale", "data": {"itemId": "A", "quantity": 5, "price": 40}}),
        ]
        .iter()
        .map(|e| NewEntry {
            transaction_id: None,
            received_at: now,
            jwt: signer.sign_jws(e.to_string().as_bytes()),
        })
        .collect();
        store.append(&key, entries).await.unwrap();
        let sent = Sent::default();
        let processor = Processor::new();
        let handled = handle(&store, &sent, &processor, &process(&key), now)
            .await
            .unwrap();
        assert!(
            matches!(
                handled,
                Handled::Processed {
                    recalculation: Some(_),
                    ..
                }
            ),
            "{handled}"
        );
        let asked = sent.sales();
        assert_eq!(asked, ["sales_i_3"]);
        // The recalculator, with a processor of its own, handles it without asking again.
        let recalculator = Processor::new();
        let message = Message::Recalculate {
            key: key.clone(),
            calculation_id: asked[0].clone(),
            trigger: Trigger::Sales,
            metadata: None,
        };
        let handled = handle(&store, &sent, &recalculator, &message, now)
            .await
            .unwrap();
        assert!(matches!(handled, Handled::Calculated { .. }), "{handled}");
        assert_eq!(sent.sales(), ["sales_i_3"]);
        // A cold processor finds the mark (nothing committed since) and the calculation
        // stored: it does not ask again.
        let handled = handle(&store, &sent, &Processor::new(), &process(&key), now)
            .await
            .unwrap();
        assert!(
            matches!(
                handled,
                Handled::Processed {
                    recalculation: None,
                    ..
                }
            ),
            "{handled}"
        );
        assert_eq!(sent.sales(), ["sales_i_3"]);
    }

    #[test]
    fn migrations_end_at_the_schema_version() {
        let conn = db::open_memory().unwrap();
        let mut conn = conn;
        assert_eq!(
            db::migrate(&mut conn, std::path::Path::new(":memory:")).unwrap(),
            0
        );
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, db::SCHEMA_VERSION);
        assert_eq!(db::SCHEMA_VERSION, 11);
    }

    /// A file written by the version 1 schema is upgraded in place on open: its records
    /// stay, the price and webhook tables appear, events of every version share one order
    /// (the old ones count as dispatched), queued messages stay on the work lane, and
    /// (version 6) the project's records are scoped by its tenant: they read back under
    /// the tenant's key, the instance record names its tenant, and a queued message in the
    /// old form (no tenant) is rewritten to name it.
    #[tokio::test]
    async fn a_version_1_database_upgrades_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        let run = Run::new("upgrade");
        let key = run.key("p", "i");
        let old_event = event(&key, "evt-old", json!({"n": 1}));
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(db::SCHEMA_V1).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            let (p, i) = (key.project_id.to_string(), key.instance_id.to_string());
            let owner = project(&key.project_id, &key.tenant, "Old project");
            let mut project_record = serde_json::to_value(&owner).unwrap();
            project_record.as_object_mut().unwrap().remove("tenant");
            conn.execute(
                "INSERT INTO projects (project_id, tenant, record) VALUES (?1, ?2, ?3)",
                rusqlite::params![p, key.tenant.as_str(), project_record.to_string()],
            )
            .unwrap();
            // Records before version 6 name no tenant.
            let mut old_instance = serde_json::to_value(instance(&key, "Old")).unwrap();
            old_instance.as_object_mut().unwrap().remove("tenant");
            conn.execute(
                "INSERT INTO instances (project_id, instance_id, record) VALUES (?1, ?2, ?3)",
                rusqlite::params![p, i, old_instance.to_string()],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO state_headers (project_id, instance_id, applied_seq, record)
                 VALUES (?1, ?2, 4, ?3)",
                rusqlite::params![
                    p,
                    i,
                    serde_json::to_string(&header(4, json!({"v": 1}))).unwrap()
                ],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO events (project_id, instance_id, event_id, record)
                 VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![
                    p,
                    i,
                    old_event.id,
                    serde_json::to_string(&old_event).unwrap()
                ],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO queue (message_group, dedupe_key, body, sent_at, visible_at)
                 VALUES (?1, ?2, ?3, 0, 0)",
                rusqlite::params![
                    format!("{p}/{i}"),
                    format!("process:{p}/{i}"),
                    json!({"kind": "processInstance", "key": {"projectId": p, "instanceId": i}})
                        .to_string()
                ],
            )
            .unwrap();
        }

        let store = EmbeddedStore::open(&path).unwrap();
        assert!(
            store
                .undispatched_events(&key, 100)
                .await
                .unwrap()
                .is_empty(),
            "events from before the outbox count as dispatched"
        );
        assert!(
            store
                .instances_with_undispatched_events(100)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .webhook_queue()
                .receive(10, Duration::from_secs(30))
                .await
                .unwrap()
                .is_empty(),
            "queued messages stay on the work lane"
        );
        let queued = store.receive(10, Duration::from_secs(30)).await.unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].message, process(&key));
        store.ack(&queued[0].receipt).await.unwrap();
        let version: i64 = super::lock(&store.inner.writer)
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(
            version,
            db::SCHEMA_VERSION,
            "upgraded to the current version"
        );
        assert_eq!(
            store.get_instance(&key).await.unwrap(),
            Some(instance(&key, "Old"))
        );
        assert_eq!(
            store.get_project(&key.project()).await.unwrap(),
            Some(project(&key.project_id, &key.tenant, "Old project"))
        );
        assert_eq!(store.applied_sequence(&key).await.unwrap(), 4);
        assert_eq!(store.latest_prices(&key).await.unwrap(), None);
        assert_eq!(store.get_matches(&key).await.unwrap(), MatchSet::default());

        let c = calculation(
            "calc-1",
            1,
            Trigger::Request,
            vec![calculated("a", 9.5, None)],
        );
        let events = prices_updated_events(&key, &c);
        assert!(store.save_calculation(&key, &c, &events).await.unwrap());
        let rules = vec![price_match("m1", "b", "a", 1.0, 2.0)];
        store.put_matches(&key, &rules, 0).await.unwrap();
        let listed = store.list_events(&key, None, 100).await.unwrap();
        assert_eq!(listed, [vec![old_event], events.clone()].concat());
        assert_eq!(
            store.undispatched_events(&key, 100).await.unwrap(),
            events,
            "events written after the upgrade are undispatched"
        );
        drop(store);

        // Opening the upgraded file again changes nothing.
        let store = EmbeddedStore::open(&path).unwrap();
        assert_eq!(
            store.latest_prices(&key).await.unwrap(),
            Some(c.without_explanations())
        );
        assert_eq!(
            store.get_matches(&key).await.unwrap(),
            MatchSet { rules, version: 1 }
        );
        assert_eq!(store.list_events(&key, None, 100).await.unwrap().len(), 2);
    }

    /// A save that fails half way (here: one item twice, which the history refuses) rolls
    /// back whole: no latest, no id, no history, no events.
    #[tokio::test]
    async fn a_failed_save_writes_nothing() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("atomic").key("p", "i");
        let c = calculation(
            "calc-1",
            1,
            Trigger::Schedule,
            vec![calculated("a", 1.0, None), calculated("a", 2.0, None)],
        );
        let events = prices_updated_events(&key, &c);
        let r = store.save_calculation(&key, &c, &events).await;
        assert!(matches!(r, Err(StoreError::Failed(_))), "{r:?}");
        assert_eq!(store.latest_prices(&key).await.unwrap(), None);
        assert!(!store.has_calculation(&key, "calc-1").await.unwrap());
        assert!(
            store
                .price_history(&key, &item_id("a"), &page(None, 10))
                .await
                .unwrap()
                .items
                .is_empty()
        );
        assert!(store.list_events(&key, None, 10).await.unwrap().is_empty());
        // The sequence is still free.
        let ok = calculation(
            "calc-2",
            1,
            Trigger::Schedule,
            vec![calculated("a", 1.0, None)],
        );
        assert!(store.save_calculation(&key, &ok, &[]).await.unwrap());
    }

    #[tokio::test]
    async fn a_cursor_this_store_did_not_make_is_not_found() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = Run::new("cursor").key("p", "i");
        for cursor in ["x", "-1", "1.5", "99999999999999999999"] {
            assert_eq!(
                store
                    .price_history(&key, &item_id("a"), &page(Some(cursor), 10))
                    .await,
                Err(StoreError::NotFound),
                "cursor {cursor:?}"
            );
        }
    }

    #[tokio::test]
    async fn prices_and_matches_survive_a_reopen() {
        let (_dir, store) = file_store();
        let path = store.path().unwrap().to_path_buf();
        let key = Run::new("reopen-prices").key("p", "i");
        let c = big_calculation("calc-1", 1, 2_500);
        let events = prices_updated_events(&key, &c);
        assert!(store.save_calculation(&key, &c, &events).await.unwrap());
        let rules = vec![price_match("m1", "seat-00002", "seat-00001", 1.25, 0.5)];
        store.put_matches(&key, &rules, 0).await.unwrap();
        drop(store);

        let store = EmbeddedStore::open(&path).unwrap();
        assert_eq!(
            store.latest_prices(&key).await.unwrap(),
            Some(c.without_explanations())
        );
        assert!(store.has_calculation(&key, "calc-1").await.unwrap());
        assert!(!store.save_calculation(&key, &c, &events).await.unwrap());
        let history = store
            .price_history(&key, &item_id("seat-00001"), &page(None, 10))
            .await
            .unwrap();
        assert_eq!(history.items.len(), 1);
        assert_eq!(history.items[0].price, c.prices[1]);
        assert_eq!(
            store.get_matches(&key).await.unwrap(),
            MatchSet { rules, version: 1 }
        );
        let next = big_calculation("calc-2", 2, 10);
        assert!(store.save_calculation(&key, &next, &[]).await.unwrap());
    }

    /// Save and load times of a 10,000-item calculation on a database file (WAL): 21 saves
    /// back to back (the writer's own checkpoint backstop, at 64 MB of WAL, lands in some
    /// of them), then 8 saves 600 ms apart (the background checkpointer keeps up).
    /// `cargo test --release -p pricing-embedded --lib -- --ignored --nocapture prices::timing`
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "timing; run with --release --ignored --nocapture"]
    async fn timing_of_10000_item_calculations() {
        use std::time::{Duration, Instant};

        fn stats(mut v: Vec<Duration>) -> String {
            v.sort();
            let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
            format!(
                "median {:.1?}, p90 {:.1?}, min {:.1?}, max {:.1?} (n = {})",
                at(0.5),
                at(0.9),
                v[0],
                v[v.len() - 1],
                v.len()
            )
        }

        let (_dir, store) = file_store();
        let key = Run::new("timing-prices").key("p", "i");
        let (burst, paced) = (21u64, 8u64);
        let calcs: Vec<_> = (1..=burst + paced)
            .map(|s| big_calculation(&format!("calc-{s}"), s, 10_000))
            .collect();
        let json_bytes = serde_json::to_string(&calcs[0]).unwrap().len();
        let (mut saves, mut paced_saves) = (Vec::new(), Vec::new());
        let (mut loads, mut histories) = (Vec::new(), Vec::new());
        for c in &calcs {
            if c.sequence > burst {
                tokio::time::sleep(Duration::from_millis(600)).await;
            }
            let events = prices_updated_events(&key, c);
            let t = Instant::now();
            assert!(store.save_calculation(&key, c, &events).await.unwrap());
            let elapsed = t.elapsed();
            if c.sequence > burst {
                paced_saves.push(elapsed);
            } else {
                saves.push(elapsed);
            }
            let t = Instant::now();
            let latest = store.latest_prices(&key).await.unwrap().unwrap();
            loads.push(t.elapsed());
            assert_eq!(latest.prices.len(), 10_000);
            let t = Instant::now();
            let h = store
                .price_history(&key, &item_id("seat-04321"), &page(None, 100))
                .await
                .unwrap();
            histories.push(t.elapsed());
            assert_eq!(h.items.len() as u64, c.sequence);
        }
        let t = Instant::now();
        let _ = serde_json::to_string(&calcs[0]).unwrap();
        let encode = t.elapsed();
        println!(
            "10,000-item calculation ({json_bytes} bytes of JSON, 9,000 history rows, \
             10 events), file store:\n  save back to back: {}\n  save 600 ms apart: {}\n  \
             latest_prices: {}\n  price_history of one item (1..={} entries): {}\n  \
             (one serde_json encode of the whole calculation, one thread: {encode:.1?})",
            stats(saves),
            stats(paced_saves),
            stats(loads),
            burst + paced,
            stats(histories),
        );
    }
}

mod webhooks {
    use std::time::{Duration, Instant};

    use pricing_contract::fixtures::{Run, process};
    use pricing_core::model::Message;
    use pricing_core::ports::WorkQueue;

    use super::super::{deliveries, events, queue};
    use super::{EmbeddedStore, lock};

    fn deliver(run: &Run, name: &str) -> Message {
        Message::Deliver {
            webhook_id: run.webhook_id(name),
        }
    }

    #[tokio::test]
    async fn sends_route_by_lane_from_either_handle() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let hooks = store.webhook_queue();
        let run = Run::new("route");
        let key = run.key("p", "i");
        let recalc = Message::Recalculate {
            key: run.key("p", "j"),
            calculation_id: "calc-1".into(),
            trigger: pricing_core::pricing::Trigger::Request,
            metadata: None,
        };
        store.send(&deliver(&run, "a")).await.unwrap();
        hooks.send(&process(&key)).await.unwrap();
        hooks.send(&recalc).await.unwrap();

        let long = Duration::from_secs(60);
        let work = store.receive(10, long).await.unwrap();
        let got: Vec<_> = work.iter().map(|r| r.message.clone()).collect();
        assert_eq!(
            got,
            vec![process(&key), recalc],
            "instance work goes to the store's lane, whichever handle sent it"
        );
        let webhooks = hooks.receive(10, long).await.unwrap();
        assert_eq!(webhooks.len(), 1);
        assert_eq!(webhooks[0].message, deliver(&run, "a"));

        // Receipts act on their own lane only.
        store.ack(&webhooks[0].receipt).await.unwrap();
        hooks.ack(&work[0].receipt).await.unwrap();
        hooks
            .retry_later(&work[1].receipt, Duration::ZERO)
            .await
            .unwrap();
        let rows: i64 = lock(&store.inner.writer)
            .query_row("SELECT COUNT(*) FROM queue", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 3, "acks with another lane's receipts delete nothing");
        assert!(
            store.receive(10, long).await.unwrap().is_empty(),
            "a retry_later with another lane's receipt changes nothing"
        );
        hooks.ack(&webhooks[0].receipt).await.unwrap();
        for r in &work {
            store.ack(&r.receipt).await.unwrap();
        }
        let rows: i64 = lock(&store.inner.writer)
            .query_row("SELECT COUNT(*) FROM queue", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0);
    }

    #[tokio::test]
    async fn release_in_flight_is_per_lane_and_keeps_retry_delays() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let hooks = store.webhook_queue();
        let run = Run::new("release-lanes");
        let long = Duration::from_secs(600);
        store.send(&process(&run.key("p", "i"))).await.unwrap();
        store.send(&deliver(&run, "a")).await.unwrap();
        store.send(&deliver(&run, "b")).await.unwrap();
        assert_eq!(store.receive(10, long).await.unwrap().len(), 1);
        let got = hooks.receive(10, long).await.unwrap();
        assert_eq!(got.len(), 2);
        // b waits for its next attempt (hours, for a webhook).
        hooks
            .retry_later(&got[1].receipt, Duration::from_secs(3600))
            .await
            .unwrap();

        assert_eq!(
            store.release_in_flight().await.unwrap(),
            1,
            "the work lane only"
        );
        assert_eq!(
            hooks.release_in_flight().await.unwrap(),
            1,
            "the received webhook, not the one waiting for its retry"
        );
        let again = hooks.receive(10, long).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].message, got[0].message);
        assert_eq!(again[0].receive_count, 2);
        assert_eq!(store.receive(10, long).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn wait_for_work_is_per_lane() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let hooks = store.webhook_queue();
        let run = Run::new("wait-lanes");
        store.send(&deliver(&run, "a")).await.unwrap();

        let t = Instant::now();
        hooks.wait_for_work(Duration::from_secs(10)).await;
        assert!(t.elapsed() < Duration::from_secs(5), "webhooks waiting");
        let t = Instant::now();
        store.wait_for_work(Duration::from_millis(200)).await;
        assert!(
            t.elapsed() >= Duration::from_millis(180),
            "a webhook is no work for the instance-work lane"
        );

        // A send to one lane wakes that lane's waiters, not the other's.
        let got = hooks.receive(10, Duration::from_secs(60)).await.unwrap();
        assert_eq!(got.len(), 1);
        let sender = store.clone();
        let key = run.key("p", "i");
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sender.send(&process(&key)).await.unwrap();
        });
        let t = Instant::now();
        hooks.wait_for_work(Duration::from_millis(400)).await;
        assert!(
            t.elapsed() >= Duration::from_millis(380),
            "instance work does not wake the webhooks lane"
        );
        task.await.unwrap();
        let sender = hooks.clone();
        let m = deliver(&run, "b");
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sender.send(&m).await.unwrap();
        });
        let t = Instant::now();
        hooks.wait_for_work(Duration::from_secs(10)).await;
        assert!(t.elapsed() < Duration::from_secs(5), "woken by the send");
        task.await.unwrap();
    }

    /// Many deliveries waiting for retries and a large backlog do not slow receives: they
    /// hand out the oldest visible messages and skip no more than the groups in flight.
    #[tokio::test]
    async fn receive_hands_out_up_to_max_past_retrying_webhooks() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let hooks = store.webhook_queue();
        let run = Run::new("backlog");
        let long = Duration::from_secs(600);
        for n in 0..50 {
            hooks.send(&deliver(&run, &format!("r{n}"))).await.unwrap();
        }
        for r in hooks.receive(100, long).await.unwrap() {
            hooks
                .retry_later(&r.receipt, Duration::from_secs(3600))
                .await
                .unwrap();
        }
        for n in 0..30 {
            hooks
                .send(&deliver(&run, &format!("b{n:02}")))
                .await
                .unwrap();
        }
        let got = hooks.receive(8, long).await.unwrap();
        let names: Vec<_> = got.iter().map(|r| r.message.clone()).collect();
        let want: Vec<_> = (0..8).map(|n| deliver(&run, &format!("b{n:02}"))).collect();
        assert_eq!(names, want, "up to max, oldest first");
        assert_eq!(hooks.receive(100, long).await.unwrap().len(), 22);
    }

    /// The hot queries walk their indexes: no full scans, no sorting.
    #[test]
    fn hot_queries_use_their_indexes() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let conn = lock(&store.inner.writer);
        for (sql, index) in [
            (events::UNDISPATCHED_INSTANCES, "event_heads_undispatched"),
            (deliveries::OVERDUE, "deliveries_due"),
            (deliveries::LIST_PAGE, "deliveries_by_subscription"),
            (queue::CANDIDATES, "queue_ready"),
            (queue::IN_FLIGHT, "queue_in_flight"),
            (queue::OLDEST_OF_GROUP, "queue_by_group"),
            (queue::NEXT_VISIBLE, "queue_ready"),
            (queue::READY, "queue_in_flight"),
            (queue::ACK, "sqlite_autoindex_queue_1"),
            (queue::RETRY_LATER, "sqlite_autoindex_queue_1"),
        ] {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let nulls = std::iter::repeat_n(rusqlite::types::Null, stmt.parameter_count());
            let plan: Vec<String> = stmt
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join("; ");
            assert!(plan.contains(index), "{sql}\nuses {index}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}\nsorts: {plan}");
        }
    }
}

/// Group commit: jobs queued while the writer is busy share the next transaction, and each
/// keeps its own outcome there (sequences, duplicates across requests, a failed or
/// panicking job rolled back alone).
mod group_commit {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::db::DbError;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_share_a_transaction_and_keep_their_own_outcomes() {
        let (_dir, store) = file_store();
        let run = Run::new("group");
        let key = run.key("p", "i");
        store
            .create_instance(&instance(&key, "I"), &header(0, json!({})))
            .await
            .unwrap();
        // A first job holds the writer until every other job is queued, so that those
        // land in one group.
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let gate = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .in_group("gate", move |_| {
                        started_tx.send(()).unwrap();
                        released.recv().unwrap();
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::spawn_blocking(move || started.recv().unwrap())
            .await
            .unwrap();

        let queued = Arc::new(AtomicUsize::new(0));
        let mut appends = Vec::new();
        // 20 new transaction ids, then each of the first 5 again in a request of its own.
        for n in (0..20).chain(0..5) {
            let (store, key, queued) = (store.clone(), key.clone(), queued.clone());
            appends.push(tokio::spawn(async move {
                queued.fetch_add(1, Ordering::SeqCst);
                let tid = format!("t{n}");
                store.append(&key, vec![new_entry(Some(&tid), n)]).await
            }));
        }
        // A job that writes, then fails: its write must be undone, nothing else.
        let failing = tokio::spawn({
            let (store, project, queued) =
                (store.clone(), key.project_storage_key(), queued.clone());
            async move {
                queued.fetch_add(1, Ordering::SeqCst);
                store
                    .in_group("failing", move |conn| {
                        conn.execute(
                            "INSERT INTO entries (project_id, instance_id, seq, received_at, jwt)
                             VALUES (?1, 'i', 1000, 'x', 'x')",
                            rusqlite::params![project],
                        )?;
                        Err::<(), _>(DbError::Store(StoreError::Failed("refused".into())))
                    })
                    .await
            }
        });
        let panicking = tokio::spawn({
            let (store, queued) = (store.clone(), queued.clone());
            async move {
                queued.fetch_add(1, Ordering::SeqCst);
                store
                    .in_group("panicking", |conn| {
                        conn.execute_batch("DELETE FROM log_heads")?;
                        panic!("a job panics");
                        #[allow(unreachable_code)]
                        Ok(())
                    })
                    .await
            }
        });
        while queued.load(Ordering::SeqCst) < 27 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.send(()).unwrap();
        gate.await.unwrap().unwrap();

        let mut first_seq = std::collections::HashMap::new();
        let mut outcomes = Vec::new();
        for (i, a) in appends.into_iter().enumerate() {
            let out = a.await.unwrap().unwrap();
            assert_eq!(out.len(), 1);
            outcomes.push((i, out[0]));
        }
        for (i, out) in &outcomes[..20] {
            match out {
                AppendOutcome::Accepted { sequence } => first_seq.insert(*i, *sequence),
                other => panic!("t{i}: {other:?}"),
            };
        }
        let mut seqs: Vec<u64> = first_seq.values().copied().collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=20).collect::<Vec<u64>>(), "gapless, one each");
        for (i, out) in &outcomes[20..] {
            let original = i - 20;
            assert_eq!(
                out,
                &AppendOutcome::Duplicate {
                    sequence: first_seq[&original]
                },
                "t{original} again"
            );
        }
        assert_eq!(
            failing.await.unwrap(),
            Err(StoreError::Failed("refused".into()))
        );
        assert!(matches!(
            panicking.await.unwrap(),
            Err(StoreError::Failed(_))
        ));
        // Committed: read back from the file by a reader, and the failed and panicking
        // jobs' writes are gone.
        let records = store.read(&key, 0, 100).await.unwrap();
        assert_eq!(
            records.iter().map(|r| r.sequence).collect::<Vec<_>>(),
            (1..=20).collect::<Vec<u64>>()
        );
        assert_eq!(store.last_sequence(&key).await.unwrap(), 20);
        let next = store
            .append(&key, vec![new_entry(Some("after"), 99)])
            .await
            .unwrap();
        assert_eq!(next, vec![AppendOutcome::Accepted { sequence: 21 }]);
    }

    /// A job alone in its group runs without a savepoint: its failure or panic still undoes
    /// all its writes (the whole transaction is rolled back) and answers its own error.
    #[tokio::test]
    async fn a_job_alone_in_its_group_is_undone_whole_when_it_fails() {
        let (_dir, store) = file_store();
        let key = Run::new("group-alone").key("p", "i");
        let first = store.append(&key, vec![new_entry(Some("a"), 1)]).await;
        assert_eq!(
            first.unwrap(),
            vec![AppendOutcome::Accepted { sequence: 1 }]
        );
        let project = key.project_storage_key();
        let failed = store
            .in_group("failing", move |conn| {
                conn.execute(
                    "INSERT INTO entries (project_id, instance_id, seq, received_at, jwt)
                     VALUES (?1, 'i', 1000, 'x', 'x')",
                    rusqlite::params![project],
                )?;
                Err::<(), _>(DbError::Store(StoreError::Failed("refused".into())))
            })
            .await;
        assert_eq!(failed, Err(StoreError::Failed("refused".into())));
        let panicked = store
            .in_group("panicking", |conn| {
                conn.execute_batch("DELETE FROM log_heads")?;
                panic!("a job panics");
                #[allow(unreachable_code)]
                Ok(())
            })
            .await;
        assert!(matches!(panicked, Err(StoreError::Failed(_))));
        let records = store.read(&key, 0, 100).await.unwrap();
        assert_eq!(records.iter().map(|r| r.sequence).collect::<Vec<_>>(), [1]);
        assert_eq!(store.last_sequence(&key).await.unwrap(), 1);
        let next = store.append(&key, vec![new_entry(Some("b"), 2)]).await;
        assert_eq!(next.unwrap(), vec![AppendOutcome::Accepted { sequence: 2 }]);
    }

    #[tokio::test]
    async fn a_dropped_store_stops_its_writer() {
        let (_dir, store) = file_store();
        let run = Run::new("group-drop");
        let key = run.key("p", "i");
        store
            .append(&key, vec![new_entry(Some("t"), 1)])
            .await
            .unwrap();
        let weak = Arc::downgrade(&store.inner);
        drop(store);
        // The writer thread holds no strong reference between groups.
        for _ in 0..100 {
            if weak.upgrade().is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the store outlived its last handle");
    }
}
