use pricing_core::ports::{Commit, MAX_COMMIT_RECORDS, StateStore, StoreError};
use pricing_core::state::{Header, InstanceState, ItemState};
use serde_json::json;

use crate::fixtures::{Run, header, item, item_id, product, product_id};

fn commit(expected: u64, header: Header, items: Vec<ItemState>) -> Commit {
    Commit {
        expected_applied: expected,
        header,
        items,
        products: Vec::new(),
        events: Vec::new(),
    }
}

fn is_conflict<T: std::fmt::Debug>(r: &Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Conflict(_)))
}

/// StateStore: the default state for an unknown instance, commits conditional on the
/// stored applied sequence (`Conflict` and nothing written otherwise, also when two race),
/// upserts of item and product records, records untouched by a commit kept, commits of
/// up to `MAX_COMMIT_RECORDS` records (and none larger), states larger than one commit.
pub async fn state_store_contract<S: StateStore>(store: &S) {
    let run = Run::new("state");
    let key = run.key("p", "i");

    assert_eq!(
        store.load_state(&key).await.expect("load_state"),
        InstanceState::default(),
        "an instance without state loads the default state"
    );
    assert_eq!(
        store
            .applied_sequence(&key)
            .await
            .expect("applied_sequence"),
        0
    );

    // A first commit on an instance without a stored header builds on sequence 0.
    let h1 = header(3, json!({"name": "Gala", "dates": []}));
    let first = Commit {
        products: vec![product("prod", 1)],
        ..commit(
            0,
            h1.clone(),
            vec![item("a", "prod", 1, 2), item("b", "prod", 0, 3)],
        )
    };
    store.commit(&key, first.clone()).await.expect("commit");
    let mut expected = InstanceState {
        header: h1.clone(),
        ..InstanceState::default()
    };
    for i in &first.items {
        expected.items.insert(i.item_id.clone(), i.clone());
    }
    expected
        .products
        .insert(product_id("prod"), first.products[0].clone());
    assert_eq!(
        store.load_state(&key).await.expect("load_state"),
        expected,
        "load_state assembles the header, items and products"
    );
    assert_eq!(
        store
            .applied_sequence(&key)
            .await
            .expect("applied_sequence"),
        3
    );

    // Stale and future expectations are refused, and write nothing.
    for wrong in [0, 2, 4] {
        let r = store
            .commit(
                &key,
                Commit {
                    products: vec![product("other", 9)],
                    ..commit(
                        wrong,
                        header(9, json!({"x": 1})),
                        vec![item("c", "prod", 5, 9), item("a", "prod", 9, 9)],
                    )
                },
            )
            .await;
        assert!(
            is_conflict(&r),
            "a commit expecting {wrong} while the state is at 3 is a Conflict: {r:?}"
        );
    }
    assert_eq!(
        store.load_state(&key).await.expect("load_state"),
        expected,
        "a refused commit writes nothing"
    );

    // Upserts: a changes, c is new, b and the product stay.
    let h2 = header(7, json!({"name": "Gala", "dates": [], "v": 2}));
    let a2 = item("a", "prod", 4, 7);
    let c = item("c", "prod", 0, 6);
    store
        .commit(&key, commit(3, h2.clone(), vec![a2.clone(), c.clone()]))
        .await
        .expect("commit");
    expected.header = h2;
    expected.items.insert(item_id("a"), a2);
    expected.items.insert(item_id("c"), c);
    assert_eq!(
        store.load_state(&key).await.expect("load_state"),
        expected,
        "a commit upserts its records and keeps the others"
    );

    // A product update alone (with the header).
    let p2 = product("prod", 8);
    let h3 = header(8, json!({"v": 3}));
    store
        .commit(
            &key,
            Commit {
                products: vec![p2.clone()],
                ..commit(7, h3.clone(), Vec::new())
            },
        )
        .await
        .expect("commit");
    expected.header = h3;
    expected.products.insert(product_id("prod"), p2);
    assert_eq!(store.load_state(&key).await.expect("load_state"), expected);

    // Two processors racing from the same state: exactly one wins, the other writes nothing.
    let (x, y) = tokio::join!(
        store.commit(
            &key,
            commit(
                8,
                header(9, json!({"by": "x"})),
                vec![item("x", "prod", 1, 9)]
            )
        ),
        store.commit(
            &key,
            commit(
                8,
                header(9, json!({"by": "y"})),
                vec![item("y", "prod", 1, 9)]
            )
        ),
    );
    let state = store.load_state(&key).await.expect("load_state");
    match (&x, &y) {
        (Ok(()), r) if is_conflict(r) => {
            assert!(
                state.items.contains_key(&item_id("x")) && !state.items.contains_key(&item_id("y"))
            );
            assert_eq!(state.header.meta["by"], "x");
        }
        (r, Ok(())) if is_conflict(r) => {
            assert!(
                state.items.contains_key(&item_id("y")) && !state.items.contains_key(&item_id("x"))
            );
            assert_eq!(state.header.meta["by"], "y");
        }
        other => panic!("two commits from the same state: one Ok and one Conflict, got {other:?}"),
    }
    assert_eq!(
        store
            .applied_sequence(&key)
            .await
            .expect("applied_sequence"),
        9
    );

    // Size limits: MAX_COMMIT_RECORDS records fit in one commit, one more does not.
    let big_key = run.key("p", "big");
    let too_many: Vec<ItemState> = (0..MAX_COMMIT_RECORDS)
        .map(|n| item(&format!("t{n:03}"), "prod", 0, 1))
        .collect();
    let r = store
        .commit(&big_key, commit(0, header(1, json!({})), too_many))
        .await;
    assert!(
        r.is_err(),
        "a commit of more than MAX_COMMIT_RECORDS records is refused"
    );
    assert_eq!(
        store.load_state(&big_key).await.expect("load_state"),
        InstanceState::default(),
        "a refused oversized commit writes nothing"
    );
    let per_commit = MAX_COMMIT_RECORDS - 1;
    let rounds = 12;
    for round in 0..rounds {
        let items: Vec<ItemState> = (0..per_commit)
            .map(|n| {
                item(
                    &format!("item-{round:02}-{n:03}"),
                    "prod",
                    n as u64,
                    round as u64 + 1,
                )
            })
            .collect();
        let c = commit(
            round as u64,
            header(round as u64 + 1, json!({"round": round})),
            items,
        );
        assert_eq!(c.record_count(), MAX_COMMIT_RECORDS);
        store
            .commit(&big_key, c)
            .await
            .expect("a commit of MAX_COMMIT_RECORDS records");
    }
    let state = store.load_state(&big_key).await.expect("load_state");
    assert_eq!(
        state.items.len(),
        rounds * per_commit,
        "a state larger than one commit loads whole"
    );
    assert_eq!(state.header.applied_seq, rounds as u64);
    assert_eq!(
        state.items[&item_id("item-05-017")],
        item("item-05-017", "prod", 17, 6)
    );

    // States are per instance.
    assert_eq!(
        store
            .load_state(&run.key("p", "untouched"))
            .await
            .expect("load_state"),
        InstanceState::default()
    );
    assert_eq!(
        store
            .load_state(&run.key("q", "i"))
            .await
            .expect("load_state"),
        InstanceState::default(),
        "the same instance id in another project has its own state"
    );
}
