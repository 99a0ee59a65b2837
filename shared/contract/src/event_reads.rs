//! Reading an instance's events through the API's read (`pricing_core::webhooks::
//! read_events` over `EventStore::list_events`): filters by type and time, paging by event
//! id, the bounds of a page (count, bytes, events examined), and isolation between
//! instances and tenants.

use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{EventStore, MAX_COMMIT_RECORDS, StoreError};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{EventPage, EventQuery, MAX_EVENTS_EXAMINED, read_events};
use serde_json::json;

use crate::fixtures::{Run, at, event};

fn typed(key: &InstanceKey, id: &str, kind: &str, created: &str) -> Event {
    Event {
        event_type: kind.into(),
        created_at: at(created),
        ..event(key, id, json!({"id": id}))
    }
}

fn query() -> EventQuery {
    EventQuery {
        types: Vec::new(),
        since: None,
        until: None,
        after: None,
        limit: 100,
        max_bytes: 1 << 20,
    }
}

fn ids(page: &EventPage) -> Vec<&str> {
    page.items.iter().map(|e| e.id.as_str()).collect()
}

async fn read<S: EventStore>(store: &S, key: &InstanceKey, q: &EventQuery) -> EventPage {
    read_events(store, key, q).await.expect("read_events")
}

/// Every page from `q.after` on, following `next`.
async fn read_all<S: EventStore>(store: &S, key: &InstanceKey, q: &EventQuery) -> Vec<String> {
    let mut q = q.clone();
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let page = read(store, key, &q).await;
        assert!(page.items.len() <= q.limit, "a page holds at most limit");
        out.extend(page.items.iter().map(|e| e.id.clone()));
        match page.next {
            Some(next) => q.after = Some(next),
            None => return out,
        }
    }
    panic!("paging did not end");
}

pub(crate) async fn event_reads<S: EventStore>(store: &S, run: &Run) {
    let key = run.key("reads", "i");
    assert_eq!(
        read(store, &key, &query()).await,
        EventPage {
            items: Vec::new(),
            next: None
        },
        "an instance without events: an empty last page"
    );
    let events = vec![
        typed(&key, "evt-r1", "entries.rejected", "2026-03-01T10:00:00Z"),
        typed(&key, "evt-p1", "prices.updated", "2026-03-01T11:00:00Z"),
        typed(&key, "evt-r2", "entries.rejected", "2026-03-02T10:00:00Z"),
        typed(
            &key,
            "evt-d1",
            "instance.deactivated",
            "2026-03-03T10:00:00Z",
        ),
        typed(&key, "evt-r3", "entries.rejected", "2026-03-04T10:00:00Z"),
    ];
    store
        .append_events(&key, &events)
        .await
        .expect("append_events");

    let all = read(store, &key, &query()).await;
    assert_eq!(all.items, events, "every event, in creation order, whole");
    assert_eq!(all.next, None, "read to the end");

    let rejected = EventQuery {
        types: vec!["entries.rejected".into()],
        ..query()
    };
    assert_eq!(
        ids(&read(store, &key, &rejected).await),
        ["evt-r1", "evt-r2", "evt-r3"],
        "filtered by type"
    );
    let two_types = EventQuery {
        types: vec!["instance.deactivated".into(), "prices.updated".into()],
        ..query()
    };
    assert_eq!(
        ids(&read(store, &key, &two_types).await),
        ["evt-p1", "evt-d1"],
        "several types: either"
    );
    let window = EventQuery {
        since: Some(at("2026-03-01T11:00:00Z")),
        until: Some(at("2026-03-04T10:00:00Z")),
        ..query()
    };
    assert_eq!(
        ids(&read(store, &key, &window).await),
        ["evt-p1", "evt-r2", "evt-d1"],
        "since is inclusive, until exclusive"
    );
    let both = EventQuery {
        since: Some(at("2026-03-02T00:00:00Z")),
        ..rejected.clone()
    };
    assert_eq!(ids(&read(store, &key, &both).await), ["evt-r2", "evt-r3"]);

    // Paging: a page of `limit` names its last event; the next one goes on after it.
    let first = read(
        store,
        &key,
        &EventQuery {
            limit: 2,
            ..rejected.clone()
        },
    )
    .await;
    assert_eq!(ids(&first), ["evt-r1", "evt-r2"]);
    assert_eq!(first.next.as_deref(), Some("evt-r2"));
    let second = read(
        store,
        &key,
        &EventQuery {
            limit: 2,
            after: first.next.clone(),
            ..rejected.clone()
        },
    )
    .await;
    assert_eq!(ids(&second), ["evt-r3"]);
    assert_eq!(second.next, None, "the last page");
    // Any event id is a cursor, of any type (a webhook's id).
    assert_eq!(
        ids(&read(
            store,
            &key,
            &EventQuery {
                after: Some("evt-p1".into()),
                ..rejected.clone()
            }
        )
        .await),
        ["evt-r2", "evt-r3"],
        "after an event of another type"
    );
    assert_eq!(
        read_events(
            store,
            &key,
            &EventQuery {
                after: Some("evt-unknown".into()),
                ..query()
            }
        )
        .await,
        Err(StoreError::NotFound),
        "an unknown cursor is NotFound"
    );

    // Bytes: the page stops before the event that would not fit (the first always does).
    let one = serde_json::to_vec(&events[0]).expect("json").len();
    let small = EventQuery {
        max_bytes: one + 1,
        ..query()
    };
    let page = read(store, &key, &small).await;
    assert_eq!(ids(&page), ["evt-r1"], "one event fits");
    assert_eq!(page.next.as_deref(), Some("evt-r1"));
    let tiny = EventQuery {
        max_bytes: 1,
        ..query()
    };
    assert_eq!(
        read_all(store, &key, &tiny).await,
        ["evt-r1", "evt-p1", "evt-r2", "evt-d1", "evt-r3"],
        "a page always holds one event, so paging progresses"
    );

    // Other instances and other tenants' instances of the same ids see none of them.
    let other_instance = run.key("reads", "j");
    let other_tenant = run.key_of(&run.tenant("other"), "reads", "i");
    assert!(
        read(store, &other_instance, &query())
            .await
            .items
            .is_empty()
    );
    assert!(
        read(store, &other_tenant, &query()).await.items.is_empty(),
        "another tenant's instance of the same project and instance ids is another instance"
    );
    assert_eq!(
        read_events(
            store,
            &other_tenant,
            &EventQuery {
                after: Some("evt-r1".into()),
                ..query()
            }
        )
        .await,
        Err(StoreError::NotFound),
        "another tenant's event id is no cursor here"
    );
    store
        .append_events(
            &other_tenant,
            &[typed(
                &other_tenant,
                "evt-r1",
                "entries.rejected",
                "2026-03-01T10:00:00Z",
            )],
        )
        .await
        .expect("append_events");
    assert_eq!(
        ids(&read(store, &other_tenant, &rejected).await),
        ["evt-r1"]
    );
    assert_eq!(
        ids(&read(store, &key, &rejected).await),
        ["evt-r1", "evt-r2", "evt-r3"],
        "the other tenant's event is not ours"
    );

    examined_bound(store, run).await;
}

/// A filtered page examines at most `MAX_EVENTS_EXAMINED` events: over many events of
/// other types it ends (perhaps empty) with a cursor, and the next page finds the match.
async fn examined_bound<S: EventStore>(store: &S, run: &Run) {
    let key = run.key("reads", "many");
    let noise = MAX_EVENTS_EXAMINED + 10;
    let created = Timestamp::parse("2026-03-01T00:00:00Z").expect("time");
    let all: Vec<Event> = (0..noise)
        .map(|n| Event {
            event_type: "prices.updated".into(),
            created_at: created,
            ..event(&key, &format!("evt-n{n:05}"), json!({}))
        })
        .chain([typed(
            &key,
            "evt-last",
            "entries.rejected",
            "2026-03-02T00:00:00Z",
        )])
        .collect();
    for chunk in all.chunks(MAX_COMMIT_RECORDS) {
        store
            .append_events(&key, chunk)
            .await
            .expect("append_events");
    }
    let rejected = EventQuery {
        types: vec!["entries.rejected".into()],
        ..query()
    };
    let first = read(store, &key, &rejected).await;
    assert!(first.items.is_empty(), "no match among the first examined");
    assert_eq!(
        first.next.as_deref(),
        Some(format!("evt-n{:05}", MAX_EVENTS_EXAMINED - 1).as_str()),
        "the page ends after MAX_EVENTS_EXAMINED events with the last one examined"
    );
    assert_eq!(
        read_all(store, &key, &rejected).await,
        ["evt-last"],
        "following next finds it"
    );
}
