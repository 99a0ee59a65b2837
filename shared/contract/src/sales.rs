//! ProjectSales: the product records of a project's other instances, newest first, bounded
//! by instance count, never the asking instance's own nor another project's; with their
//! sales per share of the period and the period itself (how far an instance still selling
//! has come).

use pricing_core::ids::ItemId;
use pricing_core::ports::{Commit, InstanceStore, ProjectSales, StateStore};
use pricing_core::time::{Period, Timestamp};

use crate::fixtures::{Run, header, instance, product};

pub async fn project_sales_contract<S: InstanceStore + StateStore + ProjectSales>(store: &S) {
    let run = Run::new("sales");
    let keys = [
        run.key("p", "i1"),
        run.key("p", "i2"),
        run.key("p", "i3"),
        run.key("q", "i9"),
    ];
    let period = Period::new(
        Timestamp::parse("2026-06-01T00:00:00Z").expect("time"),
        Timestamp::parse("2026-07-01T00:00:00Z").expect("time"),
    )
    .expect("period");
    let ga = ItemId::parse("ga").expect("item id");
    for (n, key) in keys.iter().enumerate() {
        store
            .create_instance(&instance(key, "I"), &header(0, serde_json::json!({})))
            .await
            .expect("create");
        let mut a = product("a", 1);
        a.demand
            .record(&ga, 3 + n as i64, 50.0, Some(0.5), 50.0, None, &period);
        let commit = Commit {
            expected_applied: 0,
            header: header(1, serde_json::json!({})),
            items: Vec::new(),
            products: vec![a, product("b", 1)],
            events: Vec::new(),
        };
        store.commit(key, commit).await.expect("commit");
    }
    let got = store
        .past_products(&keys[1], 10)
        .await
        .expect("past products");
    let sold: Vec<(String, i64)> = got
        .iter()
        .map(|p| (p.product_id.to_string(), p.demand.net_sold))
        .collect();
    assert_eq!(
        sold,
        vec![
            ("a".to_owned(), 5),
            ("b".to_owned(), 0),
            ("a".to_owned(), 3),
            ("b".to_owned(), 0)
        ],
        "i3's then i1's products, with their sales; not i2's own, not project q's"
    );
    assert_eq!(
        got[0].demand.bins[10], 5,
        "the sales per share of the period survive"
    );
    assert_eq!(
        got[0].demand.period,
        Some(period),
        "and the period they are shares of (an instance still selling is read up to now)"
    );
    assert_eq!(
        got[0].demand.items.get(&ga),
        Some(&5),
        "and each item's units (how the product's demand splits among its items)"
    );
    let newest = store
        .past_products(&keys[1], 1)
        .await
        .expect("past products");
    assert_eq!(newest.len(), 2, "one instance: the newest other one");
    assert_eq!(newest[0].demand.net_sold, 5);
    let alone = store
        .past_products(&run.key("empty", "x"), 10)
        .await
        .expect("past products of an empty project");
    assert!(alone.is_empty());
}
