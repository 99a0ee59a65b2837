use pricing_core::model::{Instance, PageRequest};
use pricing_core::ports::{InstanceStore, StateStore, StoreError};
use serde_json::json;

use crate::fixtures::{Run, at, header, instance};
use crate::{check_pages, page_request};

/// InstanceStore: create/get round trip, `Conflict` on a taken (project, instance),
/// `put_instance` replaces the record as read (`Conflict` when it was written since) and
/// is `NotFound` for a missing instance, listing per project in
/// instance id order with cursor paging.
pub async fn instance_store_contract<S: InstanceStore>(store: &S) {
    let run = Run::new("instances");
    let key = run.key("p", "i00");
    let first = instance(&key, "First");
    store
        .create_instance(&first, &header(0, json!({})))
        .await
        .expect("create_instance");
    assert_eq!(
        store.get_instance(&key).await.expect("get_instance"),
        Some(first.clone()),
        "a created instance reads back as written"
    );

    let again = Instance {
        name: "Again".into(),
        ..first.clone()
    };
    assert!(
        matches!(
            store.create_instance(&again, &header(0, json!({}))).await,
            Err(StoreError::Conflict(_))
        ),
        "creating an instance with a taken id is a Conflict"
    );
    assert_eq!(
        store.get_instance(&key).await.expect("get_instance"),
        Some(first.clone()),
        "a refused create leaves the instance as it was"
    );

    // Instance ids are scoped by project.
    let elsewhere = instance(&run.key("q", "i00"), "Elsewhere");
    store
        .create_instance(&elsewhere, &header(0, json!({})))
        .await
        .expect("the same instance id in another project is another instance");
    assert_eq!(
        store
            .get_instance(&run.key("q", "i00"))
            .await
            .expect("get_instance"),
        Some(elsewhere)
    );
    assert_eq!(
        store
            .get_instance(&run.key("p", "missing"))
            .await
            .expect("get_instance"),
        None,
        "an unknown instance is None"
    );
    assert_eq!(
        store
            .get_instance(&run.key("missing", "i00"))
            .await
            .expect("get_instance"),
        None,
        "an instance of an unknown project is None"
    );

    let updated = Instance {
        name: "Renamed".into(),
        active: false,
        time_zone: None,
        deactivation_date: Some(at("2026-12-31T23:00:00Z")),
        updated_at: at("2026-02-01T00:00:00.5Z"),
        ..first.clone()
    };
    store
        .put_instance(&updated, first.updated_at)
        .await
        .expect("put_instance");
    assert_eq!(
        store.get_instance(&key).await.expect("get_instance"),
        Some(updated.clone()),
        "put_instance replaces the record"
    );
    // A replace of the record as read before that write loses, and changes nothing.
    let stale = Instance {
        name: "Stale".into(),
        updated_at: at("2026-02-01T00:00:01Z"),
        ..first.clone()
    };
    assert!(
        matches!(
            store.put_instance(&stale, first.updated_at).await,
            Err(StoreError::Conflict(_))
        ),
        "put_instance of a record written since it was read is a Conflict"
    );
    assert_eq!(
        store.get_instance(&key).await.expect("get_instance"),
        Some(updated.clone()),
        "a refused put_instance leaves the record as it was"
    );
    // The deactivation flag is kept as written.
    let announced = Instance {
        deactivation_announced: Some(true),
        updated_at: at("2026-02-01T00:00:02Z"),
        ..updated.clone()
    };
    store
        .put_instance(&announced, updated.updated_at)
        .await
        .expect("put_instance");
    assert_eq!(
        store.get_instance(&key).await.expect("get_instance"),
        Some(announced.clone())
    );
    let updated = announced;
    let ghost = instance(&run.key("p", "ghost"), "Ghost");
    assert_eq!(
        store.put_instance(&ghost, ghost.updated_at).await,
        Err(StoreError::NotFound),
        "put_instance of a missing instance is NotFound"
    );
    assert_eq!(
        store
            .get_instance(&ghost.key())
            .await
            .expect("get_instance"),
        None,
        "a refused put_instance creates nothing"
    );

    let mut expected = vec![updated];
    for n in ["i03", "i01", "i04", "i02", "i05"] {
        let i = instance(&run.key("p", n), n);
        store
            .create_instance(&i, &header(0, json!({})))
            .await
            .expect("create_instance");
        expected.push(i);
    }
    expected.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let project = run.project("p");
    for limit in [1, 2, 4, 6, 1000] {
        let project = &project;
        let listed = check_pages(limit, |cursor| async move {
            store
                .list_instances(project, &page_request(cursor, limit))
                .await
                .expect("list_instances")
        })
        .await;
        assert_eq!(
            listed, expected,
            "list_instances with limit {limit}: the project's instances in id order"
        );
    }
    let empty = store
        .list_instances(
            &run.project("none"),
            &PageRequest {
                cursor: None,
                limit: 10,
            },
        )
        .await
        .expect("list_instances");
    assert!(
        empty.items.is_empty() && empty.next.is_none(),
        "a project without instances lists an empty page without next"
    );
}

/// InstanceStore with StateStore: `create_instance` writes the initial state header with
/// the instance, and a refused create leaves the stored header alone.
pub async fn instance_state_contract<S: InstanceStore + StateStore>(store: &S) {
    let run = Run::new("instance-state");
    let key = run.key("p", "i");
    let meta = json!({"dates": [{"tag": "main", "start": "2026-05-01T18:00:00Z", "end": "2026-05-01T22:00:00Z"}]});
    let first = header(0, meta.clone());
    store
        .create_instance(&instance(&key, "I"), &first)
        .await
        .expect("create_instance");
    let state = store.load_state(&key).await.expect("load_state");
    assert_eq!(
        state.header, first,
        "create_instance writes the initial header"
    );
    assert!(state.items.is_empty() && state.products.is_empty());
    assert_eq!(
        store
            .applied_sequence(&key)
            .await
            .expect("applied_sequence"),
        0
    );

    let other = header(0, json!({"other": true}));
    assert!(
        matches!(
            store
                .create_instance(&instance(&key, "Again"), &other)
                .await,
            Err(StoreError::Conflict(_))
        ),
        "a second create is a Conflict"
    );
    assert_eq!(
        store.load_state(&key).await.expect("load_state").header,
        first,
        "a refused create does not touch the stored header"
    );

    // The header written at creation takes part in conditional commits like any other.
    let key2 = run.key("p", "j");
    store
        .create_instance(&instance(&key2, "J"), &header(0, json!({})))
        .await
        .expect("create_instance");
    let commit = pricing_core::ports::Commit {
        expected_applied: 0,
        header: header(1, json!({"after": 1})),
        items: Vec::new(),
        products: Vec::new(),
        events: Vec::new(),
    };
    store
        .commit(&key2, commit.clone())
        .await
        .expect("commit on a created instance");
    assert!(
        matches!(
            store.commit(&key2, commit).await,
            Err(StoreError::Conflict(_))
        ),
        "a replayed commit is a Conflict"
    );
    assert_eq!(
        store
            .applied_sequence(&key2)
            .await
            .expect("applied_sequence"),
        1
    );
}
