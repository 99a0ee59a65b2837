use std::collections::BTreeSet;

use pricing_core::model::{AppendOutcome, NewEntry};
use pricing_core::ports::EntryLog;

use crate::fixtures::{Run, new_entry};

fn accepted(sequence: u64) -> AppendOutcome {
    AppendOutcome::Accepted { sequence }
}

fn duplicate(sequence: u64) -> AppendOutcome {
    AppendOutcome::Duplicate { sequence }
}

/// EntryLog: sequences from 1 without gaps per instance, dedupe per (instance,
/// transactionId) against the log and within one call, outcomes in input order, entries
/// stored verbatim, `read(after, limit)` ascending, `last_sequence`, gapless sequences
/// under concurrent appends, and appends that readers see whole or not at all.
pub async fn entry_log_contract<L: EntryLog>(log: &L) {
    let run = Run::new("log");
    let key = run.key("p", "i");

    assert_eq!(
        log.last_sequence(&key).await.expect("last_sequence"),
        0,
        "an empty log is at 0"
    );
    assert!(
        log.read(&key, 0, 10).await.expect("read").is_empty(),
        "an empty log reads empty"
    );
    assert!(
        log.append(&key, Vec::new())
            .await
            .expect("append nothing")
            .is_empty(),
        "appending nothing does nothing"
    );
    assert_eq!(log.last_sequence(&key).await.expect("last_sequence"), 0);

    let first = vec![
        new_entry(Some("t-a"), 1),
        new_entry(None, 2),
        new_entry(Some("t-b"), 3),
    ];
    let out = log.append(&key, first.clone()).await.expect("append");
    assert_eq!(
        out,
        vec![accepted(1), accepted(2), accepted(3)],
        "sequences start at 1"
    );

    let second = vec![
        new_entry(Some("t-a"), 4),
        new_entry(Some("t-c"), 5),
        new_entry(Some("t-c"), 6),
        new_entry(None, 7),
        new_entry(None, 8),
        new_entry(Some("t-b"), 9),
    ];
    let out = log.append(&key, second.clone()).await.expect("append");
    assert_eq!(
        out,
        vec![
            duplicate(1),
            accepted(4),
            duplicate(4),
            accepted(5),
            accepted(6),
            duplicate(3)
        ],
        "duplicates name the first entry's sequence, also within one call; \
         entries without a transaction id are never duplicates; no gaps"
    );
    assert_eq!(log.last_sequence(&key).await.expect("last_sequence"), 6);

    let stored: Vec<&NewEntry> = vec![
        &first[0], &first[1], &first[2], &second[1], &second[3], &second[4],
    ];
    let records = log.read(&key, 0, 100).await.expect("read");
    assert_eq!(records.len(), 6, "only accepted entries are stored");
    for (n, (record, entry)) in records.iter().zip(&stored).enumerate() {
        assert_eq!(record.sequence, n as u64 + 1, "read is ascending");
        assert_eq!(
            record.transaction_id, entry.transaction_id,
            "transaction id kept"
        );
        assert_eq!(record.received_at, entry.received_at, "receivedAt kept");
        assert_eq!(
            record.jwt, entry.jwt,
            "the JWS is stored verbatim (the first one wins)"
        );
    }
    let seqs = |rs: Vec<pricing_core::model::LogRecord>| -> Vec<u64> {
        rs.iter().map(|r| r.sequence).collect()
    };
    assert_eq!(
        seqs(log.read(&key, 2, 2).await.expect("read")),
        vec![3, 4],
        "after/limit"
    );
    assert_eq!(
        seqs(log.read(&key, 4, 100).await.expect("read")),
        vec![5, 6]
    );
    assert_eq!(
        seqs(log.read(&key, 6, 100).await.expect("read")),
        Vec::<u64>::new()
    );
    assert_eq!(
        seqs(log.read(&key, 600, 100).await.expect("read")),
        Vec::<u64>::new()
    );
    assert_eq!(seqs(log.read(&key, 0, 1).await.expect("read")), vec![1]);

    // Logs are per instance: sequences and transaction ids are independent.
    let other = run.key("p", "j");
    let out = log
        .append(
            &other,
            vec![new_entry(Some("t-a"), 10), new_entry(Some("t-z"), 11)],
        )
        .await
        .expect("append");
    assert_eq!(
        out,
        vec![accepted(1), accepted(2)],
        "another instance has its own log"
    );
    assert_eq!(log.last_sequence(&key).await.expect("last_sequence"), 6);
    let elsewhere = run.key("q", "i");
    assert_eq!(
        log.append(&elsewhere, vec![new_entry(Some("t-a"), 12)])
            .await
            .expect("append"),
        vec![accepted(1)],
        "the same instance id in another project has its own log"
    );

    // A large entry (64 KiB, the per-entry limit) and a large batch.
    let big = NewEntry {
        jwt: "x".repeat(64 * 1024),
        ..new_entry(Some("t-big"), 13)
    };
    assert_eq!(
        log.append(&key, vec![big.clone()]).await.expect("append"),
        vec![accepted(7)]
    );
    let batch: Vec<NewEntry> = (0..500)
        .map(|n| new_entry(Some(&format!("batch-{n}")), 100 + n))
        .collect();
    let out = log
        .append(&key, batch)
        .await
        .expect("append a batch of 500");
    assert_eq!(
        out,
        (8..508).map(accepted).collect::<Vec<_>>(),
        "a batch is gapless"
    );
    let records = log.read(&key, 6, 2).await.expect("read");
    assert_eq!(records[0].jwt, big.jwt, "a 64 KiB entry reads back whole");
    let mut after = 0;
    let mut count = 0;
    loop {
        let page = log.read(&key, after, 97).await.expect("read");
        if page.is_empty() {
            break;
        }
        for r in &page {
            assert_eq!(r.sequence, after + 1, "paging through the log is gapless");
            after = r.sequence;
            count += 1;
        }
    }
    assert_eq!(count, 507);

    // Concurrent appends to one instance: every sequence once, no gaps; one transaction
    // id raced by two calls is accepted once.
    let racing = run.key("p", "race");
    let batch = |tag: &str| -> Vec<NewEntry> {
        (0..25)
            .map(|n| new_entry(Some(&format!("{tag}-{n}")), n))
            .collect()
    };
    let (a, b, c, d, e, f) = tokio::join!(
        log.append(&racing, batch("a")),
        log.append(&racing, batch("b")),
        log.append(&racing, batch("c")),
        log.append(&racing, batch("d")),
        log.append(&racing, vec![new_entry(Some("same"), 0)]),
        log.append(&racing, vec![new_entry(Some("same"), 1)]),
    );
    let mut sequences = BTreeSet::new();
    for out in [a, b, c, d] {
        let out = out.expect("concurrent append");
        assert_eq!(out.len(), 25);
        let seqs: Vec<u64> = out
            .iter()
            .map(|o| match o {
                AppendOutcome::Accepted { sequence } => *sequence,
                AppendOutcome::Duplicate { .. } => {
                    panic!("distinct transaction ids are not duplicates")
                }
            })
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "one call's entries are in input order"
        );
        sequences.extend(seqs);
    }
    let (e, f) = (e.expect("append"), f.expect("append"));
    let (e, f) = (e[0], f[0]);
    let winner = match (e, f) {
        (AppendOutcome::Accepted { sequence: s }, AppendOutcome::Duplicate { sequence: d })
        | (AppendOutcome::Duplicate { sequence: d }, AppendOutcome::Accepted { sequence: s }) => {
            assert_eq!(s, d, "the loser names the winner's sequence");
            s
        }
        other => panic!("one raced transaction id is accepted exactly once: {other:?}"),
    };
    sequences.insert(winner);
    assert_eq!(
        sequences.into_iter().collect::<Vec<_>>(),
        (1..=101).collect::<Vec<u64>>(),
        "concurrent appends are gapless"
    );
    assert_eq!(
        log.last_sequence(&racing).await.expect("last_sequence"),
        101
    );

    // An append is all or nothing: a reader never sees part of one, however many
    // transactions a store needs for it (200 entries, most with ids, are 5 on DynamoDB).
    let atomic = run.key("p", "atomic");
    let big: Vec<NewEntry> = (0..200)
        .map(|n| new_entry((n % 3 != 0).then(|| format!("atomic-{n}")).as_deref(), n))
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (out, seen) = tokio::join!(
        async {
            let out = log.append(&atomic, big).await;
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            out
        },
        async {
            let mut seen = BTreeSet::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let last = log.last_sequence(&atomic).await.expect("last_sequence");
                let read = log.read(&atomic, 0, 1000).await.expect("read").len();
                seen.insert((last, read as u64));
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            seen
        },
    );
    assert_eq!(out.expect("append").len(), 200);
    // (Each observation on its own: the append may land between the two calls.)
    assert!(
        seen.iter()
            .all(|(last, read)| [0, 200].contains(last) && [0, 200].contains(read)),
        "a reader saw part of an append: {seen:?}"
    );
    assert_eq!(log.read(&atomic, 0, 1000).await.expect("read").len(), 200);
}
