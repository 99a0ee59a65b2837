use pricing_core::ids::InstanceKey;
use pricing_core::model::{Event, PriceCalculation, PriceHistoryEntry};
use pricing_core::ports::{EventStore, PriceStore, SaveEvents, StoreError, StoreResult};
use pricing_core::pricing::{ItemPrice, PriceStatus, Trigger};
use pricing_core::recalc::prices_updated_events;
use serde_json::json;

use crate::fixtures::{Run, calculated, calculation, item_id, item_price, kept};
use crate::page_request;

/// The history entry `calculation` gives `item` (which it must have calculated).
fn entry(c: &PriceCalculation, item: &str) -> PriceHistoryEntry {
    let price = c
        .prices
        .iter()
        .find(|p| p.item_id.as_str() == item)
        .expect("the item is in the calculation")
        .clone();
    assert_eq!(price.status, PriceStatus::Calculated);
    assert!(price.changed, "only a changed price has a history entry");
    PriceHistoryEntry {
        sequence: c.sequence,
        calculation_id: c.calculation_id.clone(),
        trigger: c.trigger,
        calculated_at: c.calculated_at,
        price,
    }
}

/// What `latest_prices` gives back of a stored calculation: every price without its
/// explanation (explanations are in the history, once per change).
fn stored(c: &PriceCalculation) -> PriceCalculation {
    c.without_explanations()
}

fn is_conflict<T: std::fmt::Debug>(r: &StoreResult<T>) -> bool {
    matches!(r, Err(StoreError::Conflict(_)))
}

/// Every history entry of `item`, following `next` with `limit`; checks that each page holds
/// at most `limit` entries, that only the last page has no `next`, and that a page with a
/// `next` is full. Returns the entries and the number of pages.
async fn history<S: PriceStore>(
    store: &S,
    key: &InstanceKey,
    item: &str,
    limit: usize,
) -> (Vec<PriceHistoryEntry>, usize) {
    let item = item_id(item);
    let mut out = Vec::new();
    let mut cursor = None;
    for pages in 1..=10_000 {
        let page = store
            .price_history(key, &item, &page_request(cursor.take(), limit))
            .await
            .expect("price_history");
        assert!(
            page.items.len() <= limit,
            "a history page holds at most `limit` ({limit}) entries, got {}",
            page.items.len()
        );
        let full = page.items.len() == limit;
        out.extend(page.items);
        match page.next {
            None => return (out, pages),
            Some(next) => {
                assert!(full, "a history page with a next cursor is full");
                cursor = Some(next);
            }
        }
    }
    panic!("paging through the history with limit {limit} did not end");
}

async fn all_history<S: PriceStore>(
    store: &S,
    key: &InstanceKey,
    item: &str,
) -> Vec<PriceHistoryEntry> {
    history(store, key, item, 1_000).await.0
}

async fn events<S: EventStore>(store: &S, key: &InstanceKey) -> Vec<Event> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list_events(key, after.as_deref(), 100)
            .await
            .expect("list_events");
        match page.last() {
            None => return out,
            Some(last) => after = Some(last.id.clone()),
        }
        out.extend(page);
    }
}

async fn latest<S: PriceStore>(store: &S, key: &InstanceKey) -> Option<PriceCalculation> {
    store.latest_prices(key).await.expect("latest_prices")
}

async fn has<S: PriceStore>(store: &S, key: &InstanceKey, id: &str) -> bool {
    store
        .has_calculation(key, id)
        .await
        .expect("has_calculation")
}

/// PriceStore with EventStore: nothing before the first calculation; a calculation stored
/// as the latest whole (every price, kept ones too, without explanations) with a history
/// entry per calculated price that changed (none for kept or unchanged ones: the item's
/// last entry explains its price) and its events (listed by
/// `list_events`); sequences that do not follow the latest (stale, repeated, skipped, 0)
/// refused with `Conflict` and nothing written; a stored calculation id replayed (also
/// with another sequence or content) is `Ok(false)` and writes nothing; event ids already
/// stored skipped; history by ascending sequence with cursor paging; calculations,
/// histories and events per instance and per item (no prefix leaks); two calculations
/// racing for one sequence: one wins, the loser leaves no trace; calculations of 1,500
/// prices (larger than one 400 KB record) stored and read back whole.
pub async fn price_store_contract<S: PriceStore + EventStore>(store: &S) {
    let run = Run::new("prices");
    let key = run.key("p", "i");

    // Before the first calculation.
    assert_eq!(
        latest(store, &key).await,
        None,
        "no latest before the first"
    );
    assert_eq!(
        store.latest_prices_page(&key, 0, 10).await,
        Ok(None),
        "no page of latest prices before the first"
    );
    assert!(!has(store, &key, "calc-1").await);
    let empty = store
        .price_history(&key, &item_id("a"), &page_request(None, 10))
        .await
        .expect("price_history");
    assert!(
        empty.items.is_empty() && empty.next.is_none(),
        "no history before the first calculation, and no next"
    );

    // The first calculation: sequence 1. Kept prices are in the snapshot, not the history.
    let mut c1 = calculation(
        "calc-1",
        1,
        Trigger::Request,
        vec![
            calculated("a", 20.0, None),
            kept("b", 15.5),
            calculated("c", 30.25, Some(29.0)),
        ],
    );
    c1.metadata = Some(json!({"requestedBy": "ops", "batch": 7, "tags": ["x", "y"]}));
    let e1 = prices_updated_events(&key, &c1);
    assert_eq!(
        store.save_calculation(&key, &c1, &e1).await,
        Ok(true),
        "the first calculation has sequence 1"
    );
    assert_eq!(
        latest(store, &key).await.as_ref(),
        Some(&stored(&c1)),
        "latest_prices is the whole calculation (kept prices, metadata) without explanations"
    );
    assert!(has(store, &key, "calc-1").await);
    assert!(!has(store, &key, "calc-2").await);
    assert_eq!(all_history(store, &key, "a").await, vec![entry(&c1, "a")]);
    assert_eq!(
        all_history(store, &key, "b").await,
        Vec::new(),
        "a kept price has no history entry"
    );
    assert_eq!(all_history(store, &key, "c").await, vec![entry(&c1, "c")]);
    assert_eq!(
        events(store, &key).await,
        e1,
        "the calculation's events are listed by list_events"
    );

    // Sequences that do not follow the latest are refused and write nothing.
    for (id, sequence) in [("calc-x", 3), ("calc-y", 1), ("calc-z", 0)] {
        let bad = calculation(
            id,
            sequence,
            Trigger::Schedule,
            vec![calculated("a", 99.0, Some(20.0))],
        );
        let r = store
            .save_calculation(&key, &bad, &prices_updated_events(&key, &bad))
            .await;
        assert!(
            is_conflict(&r),
            "sequence {sequence} while the latest is 1 is a Conflict: {r:?}"
        );
        assert!(
            !has(store, &key, id).await,
            "a refused calculation is not stored"
        );
    }
    assert_eq!(
        latest(store, &key).await.as_ref(),
        Some(&stored(&c1)),
        "a refused calculation writes nothing"
    );
    assert_eq!(all_history(store, &key, "a").await, vec![entry(&c1, "a")]);
    assert_eq!(
        events(store, &key).await,
        e1,
        "a refused calculation writes no events"
    );

    // The second: every item calculated but c, which keeps its price.
    let c2 = calculation(
        "calc-2",
        2,
        Trigger::Schedule,
        vec![
            calculated("a", 21.5, Some(20.0)),
            calculated("b", 16.0, Some(15.5)),
            kept("c", 30.25),
        ],
    );
    let e2 = prices_updated_events(&key, &c2);
    assert_eq!(store.save_calculation(&key, &c2, &e2).await, Ok(true));
    assert_eq!(
        latest(store, &key).await.as_ref(),
        Some(&stored(&c2)),
        "the latest is replaced"
    );
    assert_eq!(
        all_history(store, &key, "a").await,
        vec![entry(&c1, "a"), entry(&c2, "a")],
        "history by ascending sequence"
    );
    assert_eq!(all_history(store, &key, "b").await, vec![entry(&c2, "b")]);
    assert_eq!(all_history(store, &key, "c").await, vec![entry(&c1, "c")]);
    let mut expected_events = [e1.clone(), e2.clone()].concat();
    assert_eq!(
        events(store, &key).await,
        expected_events,
        "events in insertion order"
    );

    // Replays: Ok(false) and nothing written, even when the sequence is stale by now or
    // the content differs.
    assert_eq!(
        store.save_calculation(&key, &c1, &e1).await,
        Ok(false),
        "a stored calculation id (with a stale sequence) is a replay"
    );
    let mut c2_again = c2.clone();
    c2_again.sequence = 3;
    c2_again.prices = vec![
        calculated("a", 77.0, Some(21.5)),
        calculated("z", 1.0, None),
    ];
    let mut e2_again = prices_updated_events(&key, &c2_again);
    e2_again[0].id = "evt-replayed-only".into();
    assert_eq!(
        store.save_calculation(&key, &c2_again, &e2_again).await,
        Ok(false),
        "a stored calculation id (with another sequence and content) is a replay"
    );
    assert_eq!(
        latest(store, &key).await.as_ref(),
        Some(&stored(&c2)),
        "a replay writes nothing"
    );
    assert_eq!(
        all_history(store, &key, "a").await,
        vec![entry(&c1, "a"), entry(&c2, "a")]
    );
    assert!(all_history(store, &key, "z").await.is_empty());
    assert_eq!(
        events(store, &key).await,
        expected_events,
        "a replay writes no events"
    );

    // An event id already stored is skipped (the first one stays); the others are written.
    let c3 = calculation(
        "calc-3",
        3,
        Trigger::Sales,
        vec![
            calculated("a", 22.0, Some(21.5)),
            calculated("b", 16.0, Some(16.0)),
        ],
    );
    let mut e3 = prices_updated_events(&key, &c3);
    let mut clash = e2[0].clone();
    clash.data = json!({"replayed": true});
    e3.insert(0, clash);
    assert_eq!(store.save_calculation(&key, &c3, &e3).await, Ok(true));
    expected_events.extend(e3[1..].iter().cloned());
    assert_eq!(
        events(store, &key).await,
        expected_events,
        "an event whose id is stored is skipped"
    );
    assert_eq!(latest(store, &key).await.as_ref(), Some(&stored(&c3)));
    assert_eq!(
        all_history(store, &key, "b").await,
        vec![entry(&c2, "b")],
        "a price calculated again at the same value has no new history entry"
    );
    let next = calculation("calc-4", 4, Trigger::Request, Vec::new());
    assert_eq!(
        store.save_calculation(&key, &next, &[]).await,
        Ok(true),
        "a calculation without prices and events"
    );
    assert_eq!(latest(store, &key).await.as_ref(), Some(&stored(&next)));
    assert_eq!(events(store, &key).await, expected_events);

    // Per instance: the same calculation id and item ids elsewhere are separate.
    for other in [run.key("p", "j"), run.key("q", "i")] {
        assert_eq!(latest(store, &other).await, None);
        assert!(
            !has(store, &other, "calc-1").await,
            "calculation ids are per instance"
        );
        assert!(all_history(store, &other, "a").await.is_empty());
        assert!(events(store, &other).await.is_empty());
    }
    let elsewhere = run.key("q", "i");
    let o1 = calculation(
        "calc-1",
        1,
        Trigger::Schedule,
        vec![calculated("a", 5.0, None)],
    );
    let oe = prices_updated_events(&elsewhere, &o1);
    assert_eq!(
        store.save_calculation(&elsewhere, &o1, &oe).await,
        Ok(true),
        "another instance starts at sequence 1, with its own calculation ids"
    );
    assert_eq!(latest(store, &elsewhere).await.as_ref(), Some(&stored(&o1)));
    assert_eq!(
        all_history(store, &elsewhere, "a").await,
        vec![entry(&o1, "a")]
    );
    assert_eq!(events(store, &elsewhere).await, oe);
    assert_eq!(latest(store, &key).await.as_ref(), Some(&stored(&next)));
    assert_eq!(
        all_history(store, &key, "a").await,
        vec![entry(&c1, "a"), entry(&c2, "a"), entry(&c3, "a")],
        "another instance's history does not leak in"
    );

    paging(store, &run).await;
    race(store, &run).await;
    large(store, &run).await;
}

/// History paging and per-item separation (item ids that prefix each other).
async fn paging<S: PriceStore + EventStore>(store: &S, run: &Run) {
    let key = run.key("p", "paged");
    let mut calcs = Vec::new();
    for seq in 1..=8u64 {
        let price = 10.0 + seq as f64;
        let a = if seq == 4 {
            kept("a", price - 1.0)
        } else {
            calculated("a", price, (seq > 1).then_some(price - 1.0))
        };
        let c = calculation(
            &format!("calc-{seq}"),
            seq,
            Trigger::Schedule,
            vec![
                a,
                calculated("a1", price + 100.0, None),
                calculated("ab", price + 200.0, None),
            ],
        );
        assert_eq!(
            store
                .save_calculation(&key, &c, &prices_updated_events(&key, &c))
                .await,
            Ok(true)
        );
        calcs.push(c);
    }
    let expected: Vec<_> = calcs
        .iter()
        .filter(|c| c.sequence != 4)
        .map(|c| entry(c, "a"))
        .collect();
    assert_eq!(expected.len(), 7);
    for (limit, pages) in [(1, 7), (2, 4), (3, 3), (6, 2), (7, 1), (8, 1), (1_000, 1)] {
        let (got, n) = history(store, &key, "a", limit).await;
        assert_eq!(got, expected, "the whole history with limit {limit}");
        assert_eq!(
            n, pages,
            "{pages} pages of at most {limit} for 7 entries: the last page has no next"
        );
    }
    let a1: Vec<_> = calcs.iter().map(|c| entry(c, "a1")).collect();
    assert_eq!(history(store, &key, "a1", 3).await.0, a1, "item a1 alone");
    assert_eq!(
        store
            .price_history(&key, &item_id("a-unknown"), &page_request(None, 5))
            .await
            .expect("price_history")
            .items,
        Vec::new()
    );
    let first = store
        .price_history(&key, &item_id("ab"), &page_request(None, 2))
        .await
        .expect("price_history");
    assert_eq!(
        first.items,
        vec![entry(&calcs[0], "ab"), entry(&calcs[1], "ab")],
        "item ab alone, from the first sequence"
    );
    assert!(first.next.is_some());
}

/// Two calculations racing for the same sequence: exactly one is stored; the loser's
/// prices, history entries and events are nowhere.
async fn race<S: PriceStore + EventStore>(store: &S, run: &Run) {
    let key = run.key("p", "race");
    let base = calculation(
        "calc-base",
        1,
        Trigger::Schedule,
        vec![calculated("a", 10.0, None)],
    );
    let base_events = prices_updated_events(&key, &base);
    assert_eq!(
        store.save_calculation(&key, &base, &base_events).await,
        Ok(true)
    );
    let x = calculation(
        "calc-x",
        2,
        Trigger::Sales,
        vec![
            calculated("a", 11.0, Some(10.0)),
            calculated("b", 1.0, None),
        ],
    );
    let y = calculation(
        "calc-y",
        2,
        Trigger::Request,
        vec![
            calculated("a", 12.0, Some(10.0)),
            calculated("c", 2.0, None),
        ],
    );
    let (ex, ey) = (
        prices_updated_events(&key, &x),
        prices_updated_events(&key, &y),
    );
    let (rx, ry) = tokio::join!(
        store.save_calculation(&key, &x, &ex),
        store.save_calculation(&key, &y, &ey),
    );
    let (winner, loser, winner_events, loser_item) = match (&rx, &ry) {
        (Ok(true), r) if is_conflict(r) => (&x, &y, &ex, "c"),
        (r, Ok(true)) if is_conflict(r) => (&y, &x, &ey, "b"),
        other => panic!(
            "two calculations racing for one sequence: one Ok(true) and one Conflict, got {other:?}"
        ),
    };
    assert_eq!(latest(store, &key).await.as_ref(), Some(&stored(winner)));
    assert!(has(store, &key, &winner.calculation_id).await);
    assert!(
        !has(store, &key, &loser.calculation_id).await,
        "the loser is not stored"
    );
    assert_eq!(
        all_history(store, &key, "a").await,
        vec![entry(&base, "a"), entry(winner, "a")],
        "the history holds the winner's entry for the sequence, not the loser's"
    );
    assert!(all_history(store, &key, loser_item).await.is_empty());
    assert_eq!(
        events(store, &key).await,
        [base_events, winner_events.clone()].concat(),
        "the loser's events are not listed"
    );

    // A calculation replayed while its first delivery is being stored: stored once.
    let z = calculation(
        "calc-z",
        3,
        Trigger::Schedule,
        vec![calculated("a", 13.0, None)],
    );
    let ez = prices_updated_events(&key, &z);
    let (r1, r2) = tokio::join!(
        store.save_calculation(&key, &z, &ez),
        store.save_calculation(&key, &z, &ez),
    );
    let rs = [r1, r2];
    assert_eq!(
        rs.iter().filter(|r| **r == Ok(true)).count(),
        1,
        "one of two identical racing saves stores the calculation: {rs:?}"
    );
    assert!(
        rs.iter()
            .all(|r| *r == Ok(true) || *r == Ok(false) || is_conflict(r)),
        "the other is a replay (or lost the sequence): {rs:?}"
    );
    assert_eq!(latest(store, &key).await.as_ref(), Some(&stored(&z)));
    assert_eq!(all_history(store, &key, "a").await.len(), 3);
    assert_eq!(store.save_calculation(&key, &z, &ez).await, Ok(false));
}

/// Calculations of 1,500 prices with explanations (some 500 KB of JSON): stored and read
/// back whole, replaced whole by the next.
async fn large<S: PriceStore + EventStore>(store: &S, run: &Run) {
    let key = run.key("p", "large");
    let prices = |round: u64| -> Vec<ItemPrice> {
        (0..1_500u64)
            .map(|n| {
                let id = format!("seat-{n:05}");
                // A kept price stays what it was (it changes only as an item's first).
                if n % 10 == 0 {
                    return item_price(&id, 20.0, Some(20.0), PriceStatus::Kept);
                }
                let price = 20.0 + (n % 40) as f64 * 0.5 + round as f64;
                item_price(&id, price, Some(price - 1.0), PriceStatus::Calculated)
            })
            .collect()
    };
    let mut previous = Vec::new();
    for round in 1..=2u64 {
        let c = calculation(
            &format!("calc-large-{round}"),
            round,
            Trigger::Request,
            prices(round),
        );
        let e = prices_updated_events(&key, &c);
        assert_eq!(e.len(), 2, "1,500 prices make two prices.updated parts");
        // The second round's parts are made by the store as it writes them (what the
        // recalculation passes); they must be the same events.
        let saved = if round == 1 {
            store.save_calculation(&key, &c, &e).await
        } else {
            let lazy = SaveEvents::PricesUpdated {
                key: &key,
                calculation: &c,
            };
            assert_eq!(lazy.len(), 2);
            store.save_calculation_with(&key, &c, lazy).await
        };
        assert_eq!(saved, Ok(true));
        assert_eq!(
            latest(store, &key).await.as_ref(),
            Some(&stored(&c)),
            "a calculation of 1,500 prices reads back whole"
        );
        // Pages of the latest prices: the same prices, in order, whatever the cut (stores
        // may keep them in pieces: the cuts cross 1,000, the embedded store's piece size).
        let whole = latest(store, &key).await.expect("a latest calculation");
        for (offset, limit) in [
            (0, 1_500),
            (0, 10),
            (700, 300),
            (999, 2),
            (990, 400),
            (1_000, 500),
            (1_499, 5),
            (1_500, 5),
            (9_999, 1),
        ] {
            let page = store
                .latest_prices_page(&key, offset, limit)
                .await
                .expect("latest_prices_page")
                .expect("a page");
            let expected: Vec<_> = whole
                .prices
                .iter()
                .skip(offset)
                .take(limit)
                .map(|p| (p.item_id.clone(), p.price))
                .collect();
            assert_eq!(page.prices, expected, "prices {offset}.. (at most {limit})");
            assert_eq!(
                (
                    page.total,
                    page.sequence,
                    &page.calculation_id,
                    page.calculated_at
                ),
                (1_500, c.sequence, &c.calculation_id, c.calculated_at)
            );
        }
        previous.push(c);
        let all_events = events(store, &key).await;
        assert_eq!(all_events.len(), 2 * round as usize);
        assert_eq!(all_events[all_events.len() - 2..], e[..]);
    }
    for item in ["seat-00001", "seat-01499"] {
        assert_eq!(
            all_history(store, &key, item).await,
            previous.iter().map(|c| entry(c, item)).collect::<Vec<_>>()
        );
    }
    assert!(
        all_history(store, &key, "seat-00010").await.is_empty(),
        "kept prices have no history"
    );
}
