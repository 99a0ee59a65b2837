use pricing_core::model::Event;
use pricing_core::ports::{Commit, EventStore, StateStore, StoreError};
use serde_json::json;

use crate::fixtures::{Run, event, header, item};

fn ids(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

/// EventStore with StateStore: events are written by commits, listed per instance in
/// insertion order (not id order) after an event id, with a limit; an event whose id
/// exists is ignored (the first one stays); a refused commit writes no events; an unknown
/// `after` id is `NotFound`.
pub async fn event_store_contract<S: StateStore + EventStore>(store: &S) {
    let run = Run::new("events");
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
