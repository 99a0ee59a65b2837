use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{
    Commit, EventStore, MAX_COMMIT_RECORDS, PriceStore, StateStore, StoreError,
};
use pricing_core::pricing::Trigger;
use pricing_core::recalc::prices_updated_events;
use serde_json::json;

use crate::fixtures::{Run, calculated, calculation, event, header, item};

fn ids(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

/// EventStore with StateStore and PriceStore: events are written by commits, listed per
/// instance in insertion order (not id order) after an event id, with a limit; an event
/// whose id exists is ignored (the first one stays); a refused commit writes no events; an
/// unknown `after` id is `NotFound`. `append_events` writes events on their own, in order
/// with those of commits and calculations, skipping stored ids. The outbox:
/// `undispatched_events` lists the events after the dispatch mark in creation order (with
/// a limit), `mark_dispatched` only moves the mark forward (an unknown id is `NotFound`),
/// events written after a mark are undispatched, and
/// `instances_with_undispatched_events` lists exactly the instances with undispatched
/// events (at most `limit`).
/// The API's read of an instance's events (`read_events`, see `event_reads.rs`) filters
/// by type and time and pages by event id on the store.
pub async fn event_store_contract<S: StateStore + EventStore + PriceStore>(store: &S) {
    let run = Run::new("events");
    listing(store, &run).await;
    appending(store, &run).await;
    outbox(store, &run).await;
    undispatched_instances(store, &run).await;
    crate::event_reads::event_reads(store, &run).await;
}

/// Commits' events listed in insertion order, per instance, paged by event id.
async fn listing<S: StateStore + EventStore>(store: &S, run: &Run) {
    let key = run.key("p", "i");
    assert!(
        store
            .list_events(&key, None, 100)
            .await
            .expect("list_events")
            .is_empty(),
        "an instance without events lists none"
    );

    // Ids deliberately out of lexicographic order.
    let e1 = event(&key, "evt-z1", json!({"n": 1}));
    let e2 = event(&key, "evt-a2", json!({"n": 2}));
    let e3 = event(
        &key,
        "evt-m3",
        json!({"n": 3, "nested": {"errors": [{"sequence": 4}]}}),
    );
    store
        .commit(
            &key,
            Commit {
                expected_applied: 0,
                header: header(1, json!({})),
                items: vec![item("a", "p", 0, 1)],
                products: Vec::new(),
                events: vec![e1.clone(), e2.clone()],
            },
        )
        .await
        .expect("commit with events");
    assert_eq!(
        store
            .list_events(&key, None, 100)
            .await
            .expect("list_events"),
        vec![e1.clone(), e2.clone()],
        "events read back as written, in insertion order"
    );

    // A replayed event (same id, other content) is ignored; the first one stays.
    let e2_again = event(&key, "evt-a2", json!({"n": "replayed"}));
    store
        .commit(
            &key,
            Commit {
                expected_applied: 1,
                header: header(2, json!({})),
                items: Vec::new(),
                products: Vec::new(),
                events: vec![e2_again, e3.clone()],
            },
        )
        .await
        .expect("commit with a replayed event");
    let all = store
        .list_events(&key, None, 100)
        .await
        .expect("list_events");
    assert_eq!(
        all,
        vec![e1.clone(), e2.clone(), e3.clone()],
        "an existing event id is ignored"
    );

    // A refused commit writes no events.
    let lost = event(&key, "evt-lost", json!({}));
    let r = store
        .commit(
            &key,
            Commit {
                expected_applied: 1,
                header: header(3, json!({})),
                items: Vec::new(),
                products: Vec::new(),
                events: vec![lost],
            },
        )
        .await;
    assert!(
        matches!(r, Err(StoreError::Conflict(_))),
        "stale commit: {r:?}"
    );
    assert_eq!(
        ids(&store
            .list_events(&key, None, 100)
            .await
            .expect("list_events")),
        vec!["evt-z1", "evt-a2", "evt-m3"],
        "a refused commit writes no events"
    );

    // Paging by event id.
    assert_eq!(
        ids(&store.list_events(&key, None, 1).await.expect("list_events")),
        vec!["evt-z1"]
    );
    assert_eq!(
        ids(&store
            .list_events(&key, Some("evt-z1"), 100)
            .await
            .expect("list_events")),
        vec!["evt-a2", "evt-m3"],
        "after an event id: the events inserted after it"
    );
    assert_eq!(
        ids(&store
            .list_events(&key, Some("evt-z1"), 1)
            .await
            .expect("list_events")),
        vec!["evt-a2"]
    );
    assert_eq!(
        ids(&store
            .list_events(&key, Some("evt-a2"), 100)
            .await
            .expect("list_events")),
        vec!["evt-m3"]
    );
    assert!(
        store
            .list_events(&key, Some("evt-m3"), 100)
            .await
            .expect("list_events")
            .is_empty(),
        "nothing after the last event"
    );
    assert_eq!(
        store.list_events(&key, Some("evt-unknown"), 100).await,
        Err(StoreError::NotFound),
        "an unknown after id is NotFound"
    );

    // Events are per instance.
    let other = run.key("p", "j");
    assert!(
        store
            .list_events(&other, None, 100)
            .await
            .expect("list_events")
            .is_empty()
    );
    let o1 = event(&other, "evt-o1", json!({}));
    store
        .commit(
            &other,
            Commit {
                expected_applied: 0,
                header: header(1, json!({})),
                items: Vec::new(),
                products: Vec::new(),
                events: vec![o1.clone()],
            },
        )
        .await
        .expect("commit");
    assert_eq!(
        store
            .list_events(&other, None, 100)
            .await
            .expect("list_events"),
        vec![o1]
    );
    assert_eq!(
        store
            .list_events(&key, None, 100)
            .await
            .expect("list_events"),
        all
    );

    // Many events in insertion order across commits.
    let many = run.key("p", "many");
    let mut written = Vec::new();
    for round in 0..5u64 {
        let events: Vec<Event> = (0..20)
            .map(|n| {
                event(
                    &many,
                    &format!("evt-{}-{round}", 99 - n),
                    json!({"round": round, "n": n}),
                )
            })
            .collect();
        written.extend(events.iter().map(|e| e.id.clone()));
        store
            .commit(
                &many,
                Commit {
                    expected_applied: round,
                    header: header(round + 1, json!({})),
                    items: Vec::new(),
                    products: Vec::new(),
                    events,
                },
            )
            .await
            .expect("commit");
    }
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list_events(&many, after.as_deref(), 7)
            .await
            .expect("list_events");
        assert!(page.len() <= 7, "list_events honours the limit");
        match page.last() {
            None => break,
            Some(last) => after = Some(last.id.clone()),
        }
        listed.extend(page.into_iter().map(|e| e.id));
    }
    assert_eq!(
        listed, written,
        "paging through events keeps insertion order"
    );
}

async fn all_events<S: EventStore>(store: &S, key: &InstanceKey) -> Vec<Event> {
    store
        .list_events(key, None, 10_000)
        .await
        .expect("list_events")
}

async fn undispatched<S: EventStore>(store: &S, key: &InstanceKey) -> Vec<Event> {
    store
        .undispatched_events(key, 10_000)
        .await
        .expect("undispatched_events")
}

async fn commit_events<S: StateStore>(store: &S, key: &InstanceKey, from: u64, events: &[Event]) {
    store
        .commit(
            key,
            Commit {
                expected_applied: from,
                header: header(from + 1, json!({})),
                items: Vec::new(),
                products: Vec::new(),
                events: events.to_vec(),
            },
        )
        .await
        .expect("commit with events");
}

/// `append_events`: events on their own, in creation order with those of commits and
/// calculations; ids already stored (by any writer) skipped, the first content staying.
async fn appending<S: StateStore + EventStore + PriceStore>(store: &S, run: &Run) {
    let key = run.key("p", "append");
    store
        .append_events(&key, &[])
        .await
        .expect("appending no events is Ok");
    assert!(all_events(store, &key).await.is_empty());

    let a1 = event(&key, "evt-q-a1", json!({"n": 1}));
    store
        .append_events(&key, std::slice::from_ref(&a1))
        .await
        .expect("append_events");
    let c1 = event(&key, "evt-b-c1", json!({"n": 2}));
    commit_events(store, &key, 0, std::slice::from_ref(&c1)).await;
    let calc = calculation(
        "calc-append",
        1,
        Trigger::Schedule,
        vec![calculated("a", 20.0, None)],
    );
    let p1 = prices_updated_events(&key, &calc);
    assert_eq!(
        store.save_calculation(&key, &calc, &p1).await,
        Ok(true),
        "save_calculation"
    );
    let a2 = event(&key, "evt-a-a2", json!({"n": 3}));
    let a3 = event(&key, "evt-z-a3", json!({"n": 4}));
    // a1 and c1 again (another content): skipped, wherever they came from.
    let a1_again = event(&key, "evt-q-a1", json!({"n": "replayed"}));
    let c1_again = event(&key, "evt-b-c1", json!({"n": "replayed"}));
    store
        .append_events(&key, &[a2.clone(), a1_again, c1_again, a3.clone()])
        .await
        .expect("append_events with stored ids");
    let mut expected = vec![a1.clone(), c1.clone()];
    expected.extend(p1.iter().cloned());
    expected.extend([a2.clone(), a3.clone()]);
    assert_eq!(
        all_events(store, &key).await,
        expected,
        "appended events keep creation order with commit and calculation events; stored ids \
         are skipped and the first content stays"
    );
    assert_eq!(
        ids(&store
            .list_events(&key, Some("evt-b-c1"), 100)
            .await
            .expect("list_events after a committed event")),
        ids(&expected[2..]),
        "listing after an event id spans appended and committed events"
    );

    // The same ids in another instance are other events.
    let other = run.key("p", "append-other");
    let o1 = event(&other, "evt-q-a1", json!({"other": true}));
    store
        .append_events(&other, std::slice::from_ref(&o1))
        .await
        .expect("append_events");
    assert_eq!(all_events(store, &other).await, vec![o1]);
    assert_eq!(all_events(store, &key).await, expected);

    // As many as a commit may hold, in order.
    let many = run.key("p", "append-many");
    let events: Vec<Event> = (0..MAX_COMMIT_RECORDS)
        .map(|n| {
            event(
                &many,
                &format!("evt-{}", MAX_COMMIT_RECORDS - n),
                json!({"n": n}),
            )
        })
        .collect();
    store
        .append_events(&many, &events)
        .await
        .expect("append_events of MAX_COMMIT_RECORDS events");
    assert_eq!(
        all_events(store, &many).await,
        events,
        "MAX_COMMIT_RECORDS appended events, in order"
    );
}

/// `undispatched_events` and `mark_dispatched` on one instance.
async fn outbox<S: StateStore + EventStore + PriceStore>(store: &S, run: &Run) {
    let key = run.key("p", "outbox");
    assert!(
        undispatched(store, &key).await.is_empty(),
        "an instance without events has none undispatched"
    );
    assert_eq!(
        store.mark_dispatched(&key, "evt-none").await,
        Err(StoreError::NotFound),
        "marking an unknown event id (no events at all) is NotFound"
    );

    let e1 = event(&key, "evt-z1", json!({"n": 1}));
    let e2 = event(&key, "evt-a2", json!({"n": 2}));
    let e3 = event(&key, "evt-m3", json!({"n": 3}));
    commit_events(store, &key, 0, &[e1.clone(), e2.clone(), e3.clone()]).await;
    assert_eq!(
        undispatched(store, &key).await,
        vec![e1.clone(), e2.clone(), e3.clone()],
        "new events are undispatched, in creation order"
    );
    assert_eq!(
        store
            .undispatched_events(&key, 2)
            .await
            .expect("undispatched_events"),
        vec![e1.clone(), e2.clone()],
        "undispatched_events honours the limit (the first ones)"
    );

    store
        .mark_dispatched(&key, "evt-z1")
        .await
        .expect("mark_dispatched");
    assert_eq!(
        undispatched(store, &key).await,
        vec![e2.clone(), e3.clone()],
        "marked events are no longer undispatched"
    );
    assert_eq!(
        store.mark_dispatched(&key, "evt-unknown").await,
        Err(StoreError::NotFound),
        "marking an unknown event id is NotFound"
    );
    assert_eq!(
        undispatched(store, &key).await,
        vec![e2.clone(), e3.clone()],
        "a refused mark changes nothing"
    );
    store
        .mark_dispatched(&key, "evt-m3")
        .await
        .expect("mark_dispatched past several events");
    assert!(
        undispatched(store, &key).await.is_empty(),
        "a mark covers every event up to and including it"
    );
    for earlier in ["evt-z1", "evt-a2", "evt-m3"] {
        store
            .mark_dispatched(&key, earlier)
            .await
            .expect("marking an event at or before the mark is Ok");
        assert!(
            undispatched(store, &key).await.is_empty(),
            "the mark only moves forward (marked {earlier} again)"
        );
    }
    assert_eq!(
        all_events(store, &key).await,
        vec![e1.clone(), e2.clone(), e3.clone()],
        "marking keeps the events listed"
    );

    // Events written after the mark, by any writer, are undispatched.
    let e4 = event(&key, "evt-b4", json!({"n": 4}));
    commit_events(store, &key, 1, std::slice::from_ref(&e4)).await;
    let calc = calculation(
        "calc-outbox",
        1,
        Trigger::Sales,
        vec![calculated("a", 20.0, None)],
    );
    let p = prices_updated_events(&key, &calc);
    assert_eq!(store.save_calculation(&key, &calc, &p).await, Ok(true));
    let e5 = event(&key, "evt-a5", json!({"n": 5}));
    // e1 again: stored and dispatched, so still not undispatched.
    store
        .append_events(&key, &[e1.clone(), e5.clone()])
        .await
        .expect("append_events");
    let mut after_mark = vec![e4.clone()];
    after_mark.extend(p.iter().cloned());
    after_mark.push(e5.clone());
    assert_eq!(
        undispatched(store, &key).await,
        after_mark,
        "events committed, calculated or appended after the mark are undispatched, in order; \
         a re-appended dispatched event stays dispatched"
    );
    store
        .mark_dispatched(&key, &p[0].id)
        .await
        .expect("mark_dispatched");
    assert_eq!(
        undispatched(store, &key).await,
        after_mark[1 + p.len()..].to_vec(),
        "marked through a calculation's event"
    );
    store
        .mark_dispatched(&key, "evt-b4")
        .await
        .expect("marking behind the mark is Ok");
    assert_eq!(
        undispatched(store, &key).await,
        after_mark[1 + p.len()..].to_vec(),
        "marking behind the mark does not move it back"
    );
    store
        .mark_dispatched(&key, "evt-a5")
        .await
        .expect("mark_dispatched");
    assert!(undispatched(store, &key).await.is_empty());

    // Marks are per instance.
    let other = run.key("p", "outbox-other");
    let o1 = event(&other, "evt-z1", json!({}));
    let o2 = event(&other, "evt-o2", json!({}));
    store
        .append_events(&other, &[o1.clone(), o2.clone()])
        .await
        .expect("append_events");
    assert_eq!(
        undispatched(store, &other).await,
        vec![o1, o2.clone()],
        "another instance's mark (and its event ids) do not count here"
    );
    store
        .mark_dispatched(&other, "evt-z1")
        .await
        .expect("mark_dispatched");
    assert_eq!(undispatched(store, &other).await, vec![o2]);
    assert!(undispatched(store, &key).await.is_empty());
}

/// `instances_with_undispatched_events` lists the instances with events after their mark,
/// and only those.
async fn undispatched_instances<S: StateStore + EventStore>(store: &S, run: &Run) {
    let pending = run.key("w", "pending");
    let partly = run.key("w", "partly");
    let done = run.key("w", "done");
    let quiet = run.key("w", "quiet");
    let ours = |keys: Vec<InstanceKey>| -> Vec<InstanceKey> {
        let mut k: Vec<_> = keys
            .into_iter()
            .filter(|k| k.project_id == run.project_id("w"))
            .collect();
        k.sort();
        k
    };
    let listed = || async {
        ours(
            store
                .instances_with_undispatched_events(10_000)
                .await
                .expect("instances_with_undispatched_events"),
        )
    };
    assert!(listed().await.is_empty(), "no instances before any event");

    commit_events(
        store,
        &pending,
        0,
        &[
            event(&pending, "e1", json!({})),
            event(&pending, "e2", json!({})),
        ],
    )
    .await;
    store
        .append_events(
            &partly,
            &[
                event(&partly, "e1", json!({})),
                event(&partly, "e2", json!({})),
            ],
        )
        .await
        .expect("append_events");
    store
        .mark_dispatched(&partly, "e1")
        .await
        .expect("mark_dispatched");
    store
        .append_events(&done, &[event(&done, "e1", json!({}))])
        .await
        .expect("append_events");
    store
        .mark_dispatched(&done, "e1")
        .await
        .expect("mark_dispatched");
    commit_events(store, &quiet, 0, &[]).await;

    let mut expected = vec![pending.clone(), partly.clone()];
    expected.sort();
    assert_eq!(
        listed().await,
        expected,
        "exactly the instances with undispatched events"
    );
    assert!(
        store
            .instances_with_undispatched_events(1)
            .await
            .expect("instances_with_undispatched_events")
            .len()
            <= 1,
        "at most `limit` instances"
    );

    store
        .mark_dispatched(&pending, "e2")
        .await
        .expect("mark_dispatched");
    store
        .mark_dispatched(&partly, "e2")
        .await
        .expect("mark_dispatched");
    assert!(
        listed().await.is_empty(),
        "no instance is listed once its events are marked dispatched"
    );

    store
        .append_events(&done, &[event(&done, "e2", json!({}))])
        .await
        .expect("append_events");
    assert_eq!(
        listed().await,
        vec![done.clone()],
        "an event written after the mark lists the instance again"
    );
    store
        .mark_dispatched(&done, "e2")
        .await
        .expect("mark_dispatched");
    assert!(listed().await.is_empty());
}
