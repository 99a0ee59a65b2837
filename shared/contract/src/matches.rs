use pricing_core::ids::InstanceKey;
use pricing_core::ports::{MatchSet, PriceMatchStore, StoreError, StoreResult};
use pricing_core::pricing::PriceMatch;

use crate::fixtures::{Run, price_match};

fn is_conflict<T: std::fmt::Debug>(r: &StoreResult<T>) -> bool {
    matches!(r, Err(StoreError::Conflict(_)))
}

async fn get<S: PriceMatchStore>(store: &S, key: &InstanceKey) -> MatchSet {
    store.get_matches(key).await.expect("get_matches")
}

/// PriceMatchStore: the empty set at version 0 before any write; `put_matches` replaces the
/// whole set (rules in the given order, an empty set too) and increments the version when
/// the stored version is the expected one, else `Conflict` and nothing written; of two
/// writers racing from one version exactly one wins; sets are per instance; a set of 300
/// rules is stored whole.
pub async fn price_match_store_contract<S: PriceMatchStore>(store: &S) {
    let run = Run::new("matches");
    let key = run.key("p", "i");

    assert_eq!(
        get(store, &key).await,
        MatchSet {
            rules: Vec::new(),
            version: 0
        },
        "no rules at version 0 before any write"
    );
    for wrong in [1, 2] {
        let r = store
            .put_matches(&key, &[price_match("m1", "b", "a", 1.0, 0.0)], wrong)
            .await;
        assert!(
            is_conflict(&r),
            "expecting version {wrong} before any write is a Conflict: {r:?}"
        );
    }
    assert_eq!(
        get(store, &key).await,
        MatchSet::default(),
        "a refused put writes nothing"
    );

    // The first write: from version 0 to 1, rules in the given order.
    let v1 = vec![
        price_match("m2", "vip", "standard", 1.5, 10.0),
        price_match("m1", "child", "standard", 0.5, 0.0),
        price_match("m3", "student", "standard", 0.75, -2.5),
    ];
    store
        .put_matches(&key, &v1, 0)
        .await
        .expect("put_matches from version 0");
    assert_eq!(
        get(store, &key).await,
        MatchSet {
            rules: v1.clone(),
            version: 1
        }
    );

    // Stale and future versions are refused and write nothing.
    for wrong in [0, 2, 7] {
        let r = store.put_matches(&key, &[], wrong).await;
        assert!(
            is_conflict(&r),
            "expecting version {wrong} while the set is at 1 is a Conflict: {r:?}"
        );
    }
    assert_eq!(
        get(store, &key).await,
        MatchSet {
            rules: v1.clone(),
            version: 1
        },
        "a refused put writes nothing"
    );

    // A put replaces the whole set (rules left out are gone).
    let v2 = vec![price_match("m9", "child", "vip", 0.25, 1.0)];
    store.put_matches(&key, &v2, 1).await.expect("put_matches");
    assert_eq!(
        get(store, &key).await,
        MatchSet {
            rules: v2.clone(),
            version: 2
        },
        "the set is replaced, not merged"
    );
    store.put_matches(&key, &[], 2).await.expect("put_matches");
    assert_eq!(
        get(store, &key).await,
        MatchSet {
            rules: Vec::new(),
            version: 3
        },
        "an empty set is a write too: the version keeps counting"
    );
    let r = store.put_matches(&key, &v2, 0).await;
    assert!(
        is_conflict(&r),
        "an emptied set is not a fresh one: version 0 is stale: {r:?}"
    );

    // Two writers from the same version: exactly one wins, its rules are stored.
    let x = vec![price_match("mx", "b", "a", 2.0, 0.0)];
    let y = vec![
        price_match("my", "c", "a", 3.0, 0.0),
        price_match("my2", "d", "a", 1.0, 5.0),
    ];
    let (rx, ry) = tokio::join!(
        store.put_matches(&key, &x, 3),
        store.put_matches(&key, &y, 3)
    );
    let winner = match (&rx, &ry) {
        (Ok(()), r) if is_conflict(r) => &x,
        (r, Ok(())) if is_conflict(r) => &y,
        other => panic!("two puts from one version: one Ok and one Conflict, got {other:?}"),
    };
    assert_eq!(
        get(store, &key).await,
        MatchSet {
            rules: winner.clone(),
            version: 4
        },
        "the winner's rules at the next version"
    );

    // Racing first writes (from version 0) likewise.
    let fresh = run.key("p", "fresh");
    let (rx, ry) = tokio::join!(
        store.put_matches(&fresh, &x, 0),
        store.put_matches(&fresh, &y, 0)
    );
    let winner = match (&rx, &ry) {
        (Ok(()), r) if is_conflict(r) => &x,
        (r, Ok(())) if is_conflict(r) => &y,
        other => panic!("two first puts: one Ok and one Conflict, got {other:?}"),
    };
    assert_eq!(
        get(store, &fresh).await,
        MatchSet {
            rules: winner.clone(),
            version: 1
        }
    );

    // Per instance.
    for other in [run.key("p", "j"), run.key("q", "i")] {
        assert_eq!(get(store, &other).await, MatchSet::default());
    }
    let elsewhere = run.key("q", "i");
    store
        .put_matches(&elsewhere, &v1, 0)
        .await
        .expect("another instance starts at version 0");
    assert_eq!(get(store, &elsewhere).await.version, 1);
    assert_eq!(
        get(store, &key).await.version,
        4,
        "a write elsewhere leaves this set alone"
    );

    // A large set is one set.
    let big_key = run.key("p", "big");
    let big: Vec<PriceMatch> = (0..300)
        .map(|n| {
            price_match(
                &format!("match-{n:03}"),
                &format!("target-{n:03}"),
                "source",
                1.0 + f64::from(n) / 8.0,
                f64::from(n % 7) - 3.0,
            )
        })
        .collect();
    store
        .put_matches(&big_key, &big, 0)
        .await
        .expect("put 300 rules");
    assert_eq!(
        get(store, &big_key).await,
        MatchSet {
            rules: big,
            version: 1
        },
        "300 rules read back whole"
    );
}
