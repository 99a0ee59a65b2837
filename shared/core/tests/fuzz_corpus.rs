//! The fuzz smoke run of the test command: every file of the fuzz corpus
//! (`fuzz/corpus/<target>/`) through the same harness functions as the libFuzzer targets
//! (`fuzz/src/lib.rs`, included here), so the invariants the fuzzer checks are checked in
//! every `cargo test`, without nightly features or cargo-fuzz (docs/fuzzing.md).

#[path = "../../../fuzz/src/lib.rs"]
mod harness;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use pricing_core::document::{MAX_DOCUMENT_BYTES, encoded_len};
use serde_json::json;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every corpus file of `target`; reports all the files that fail, not only the first.
fn replay(target: &str, run: fn(&[u8])) {
    let files = corpus(target);
    assert!(
        files.len() >= 10,
        "{target}: only {} corpus files",
        files.len()
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let data = std::fs::read(path).expect("a corpus file");
            catch_unwind(AssertUnwindSafe(|| run(&data)))
                .err()
                .map(|_| path.display().to_string())
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{target}: invariants broken by {failures:#?}"
    );
}

#[test]
fn entry_corpus_keeps_the_invariants() {
    replay("entry", harness::entry);
}

#[test]
fn patch_corpus_keeps_the_invariants() {
    replay("patch", harness::patch);
}

#[test]
fn apply_corpus_keeps_the_invariants() {
    replay("apply", harness::apply);
}

/// Found by the apply harness's invariant (stored properties within the limits), with an
/// input built near the limit: a properties patch was measured on the patched document,
/// but what is stored is the typed properties, which put back the defaults the patch
/// removed (`dynamicPricing`, `multiplier`) and write money as floats (`0` -> `0.0`).
/// A patched document of exactly 64 KiB was stored as 65,581 bytes, and every later
/// patch of the item's properties that adds anything was refused as too large.
#[test]
fn stored_item_properties_stay_within_the_limit() {
    let period = json!({"start": "2026-05-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"});
    let prices = json!({"min": 0, "max": 1, "default": 1});
    let patched = json!({"salesPeriod": period, "priceSettings": prices, "pad": ""});
    let pad = MAX_DOCUMENT_BYTES - encoded_len(&patched);
    let log = json!([
        {"type": "productRegistration", "data": {"productId": "P"}},
        {"type": "itemRegistration", "data": {
            "itemId": "A", "productId": "P", "salesPeriod": period, "priceSettings": prices}},
        {"type": "itemProperties", "data": {"itemId": "A", "patch": [
            {"op": "remove", "path": "/dynamicPricing"},
            {"op": "replace", "path": "/priceSettings", "value": prices},
            {"op": "add", "path": "/pad", "value": "x".repeat(pad)}]}}
    ]);
    harness::apply(&serde_json::to_vec(&log).expect("JSON"));
}

/// The same for a product: the typed properties add `pricingModel`, `expectedSales` and
/// `rounding` back.
#[test]
fn stored_product_properties_stay_within_the_limit() {
    let patched = json!({"pad": ""});
    let pad = MAX_DOCUMENT_BYTES - encoded_len(&patched);
    let log = json!([
        {"type": "productRegistration", "data": {"productId": "P"}},
        {"type": "productProperties", "data": {"productId": "P", "patch": [
            {"op": "replace", "path": "", "value": {"pad": "x".repeat(pad)}}]}}
    ]);
    harness::apply(&serde_json::to_vec(&log).expect("JSON"));
}

/// Found by the apply target (fuzz/artifacts, 2026-11-24): `sold` saturated at `u64::MAX`
/// instead of refusing the sale that overflows it, so the units beyond were lost and later
/// returns counted down from the wrong number. Three sales of `i64::MAX` units (accepted
/// by the parser) and one return of `i64::MAX` left `sold` at 2^63 instead of
/// 2 * (2^63 - 1). Now the overflowing sale is rejected (`outOfRange`), as is one whose
/// revenue leaves 64-bit micro-units. Since 2026-11-30 the parser refuses a count past
/// 2^53 - 1 (400 `range` at submit), so such sales no longer reach the apply step, and
/// `sold` is still the net of the sales applied (its own bound is tested in `state`).
#[test]
fn sold_is_exact_or_the_overflowing_sale_is_refused() {
    use pricing_core::entry::{ParseOptions, parse_entry};
    use pricing_core::state::{Dirty, InstanceState};
    use pricing_core::validate::Errors;

    let period = json!({"start": "2026-05-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"});
    let sale = |quantity: i64| json!({"type": "itemSale", "data": {"itemId": "A", "quantity": quantity, "price": 0}});
    let log = [
        json!({"type": "productRegistration", "data": {"productId": "P"}}),
        json!({"type": "itemRegistration", "data": {"itemId": "A", "productId": "P",
            "salesPeriod": period, "priceSettings": {"min": 0, "max": 1, "default": 1}}}),
        sale(i64::MAX),
        sale(i64::MAX),
        sale(i64::MAX),
        sale(-i64::MAX),
    ];
    let mut state = InstanceState::default();
    let mut net: i128 = 0;
    for (i, v) in log.iter().enumerate() {
        let Some(entry) = parse_entry(v, "", ParseOptions::default(), &mut Errors::default())
        else {
            assert!(i >= 2, "the registrations are valid entries");
            continue;
        };
        let accepted = state
            .apply_logged(&entry, i as u64 + 1, &mut Dirty::default())
            .is_ok();
        if accepted && let Some(q) = v["data"]["quantity"].as_i64() {
            net += i128::from(q);
        }
    }
    let item = state.items.values().next().expect("item A");
    assert_eq!(
        i128::from(item.sold),
        net,
        "sold is not the net of the accepted sales"
    );
}
