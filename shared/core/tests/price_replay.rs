//! Replaying a log reproduces its price history: the state is a fold over the log and the
//! engine is deterministic, so the same entries and the same calculation times give the
//! same prices, explanations included, also through the stored (signed) form of entries.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use pricing_core::entry::{ParseOptions, parse_entry};
use pricing_core::jws::{Signer, StoredKey, decode_jws_payload};
use pricing_core::pricing::{ItemPrice, Trigger, calculate};
use pricing_core::state::{Dirty, InstanceState};
use pricing_core::time::Timestamp;
use pricing_core::validate::Errors;
use serde_json::{Value, json};

fn log() -> Vec<Value> {
    let mut entries = vec![
        json!({"type": "productRegistration", "data": {"productId": "ga", "capacity": 200, "expectedSales": 0.8,
            "pricingModel": {"type": "pace", "maxStepChange": 0.2}, "rounding": {"step": 0.5}}}),
        json!({"type": "productRegistration", "data": {"productId": "vip", "capacity": 20,
            "pricingModel": {"type": "tiers", "tiers": [{"upToSoldPercent": 50, "multiplier": 1}, {"multiplier": 1.3}]}}}),
    ];
    for i in 0..6 {
        let product = if i < 4 { "ga" } else { "vip" };
        entries.push(json!({"type": "itemRegistration", "data": {"itemId": format!("item-{i}"), "productId": product,
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"},
            "priceSettings": {"min": 20, "max": 200, "default": 60 + i * 5}}}));
    }
    for day in 0..40 {
        entries.push(json!({"type": "itemSale", "timestamp": format!("2026-01-{:02}T12:00:00Z", day % 28 + 1),
            "data": {"itemId": format!("item-{}", day % 6), "quantity": 1 + day % 3, "price": 60}}));
        if day % 10 == 9 {
            entries.push(
                json!({"type": "itemReservation", "data": {"productId": "ga", "reserved": day}}),
            );
        }
    }
    entries
}

/// Folds the log, calculating after every `every` entries at a time derived from the
/// position; returns every calculated price.
fn history(entries: &[Value], every: usize) -> Vec<Vec<ItemPrice>> {
    let mut state = InstanceState::default();
    let mut previous = BTreeMap::new();
    let mut out = Vec::new();
    for (i, raw) in entries.iter().enumerate() {
        let mut errors = Errors::default();
        let entry =
            parse_entry(raw, "", ParseOptions::default(), &mut errors).expect("valid entry");
        state
            .apply_logged(&entry, i as u64 + 1, &mut Dirty::default())
            .expect("applies");
        if i % every == every - 1 {
            let now = Timestamp::from_millis(1_767_225_600_000 + i as i64 * 3_600_000).unwrap();
            let calc = calculate(&state, true, Trigger::Schedule, now, &previous, &[]);
            previous = calc
                .prices
                .iter()
                .map(|p| (p.item_id.clone(), p.price))
                .collect();
            out.push(calc.prices);
        }
    }
    out
}

#[test]
fn replaying_the_log_reproduces_the_price_history() {
    let entries = log();
    let first = history(&entries, 5);
    assert!(first.len() >= 8);
    assert!(
        first.iter().flatten().any(|p| p.changed),
        "prices moved over the run"
    );
    // The log as stored: signed JWS, decoded again.
    let key = StoredKey::generate("k".into(), Timestamp::now()).unwrap();
    let signer = Signer::from_keys(&[key]).unwrap();
    let stored: Vec<Value> = entries
        .iter()
        .map(|e| decode_jws_payload(&signer.sign_jws(e.to_string().as_bytes())).unwrap())
        .collect();
    let replayed = history(&stored, 5);
    assert_eq!(first, replayed);
    // And once more from scratch: deterministic.
    assert_eq!(first, history(&entries, 5));
}
