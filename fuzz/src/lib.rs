//! The fuzz harness: one function per target, each taking arbitrary bytes and panicking
//! only when an invariant of `pricing-core` breaks. The libFuzzer targets in
//! `fuzz/fuzz_targets/` call these functions, and `shared/core/tests/fuzz_corpus.rs`
//! includes this file (`#[path]`) to replay every corpus file through the same checks in
//! the normal `cargo test` (docs/fuzzing.md). It therefore uses only crates that
//! `pricing-core` depends on itself.
//!
//! Inputs are JSON, so that the corpus stays readable and hand-written seeds are easy:
//! - [`entry`]: a request body (`{requestId?, entries}` or a bare array) whose elements
//!   are entries or client JWS strings; or any bytes as one JWS string.
//! - [`patch`]: `[document, change]`, the change being an RFC 6902 patch (array) or a
//!   deprecated `update` (object).
//! - [`apply`]: an array of entries (objects, signed here as the log stores them, or JWS
//!   strings), replayed through the entry processor's apply step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use json_patch::{Patch, PatchOperation};
use pricing_core::document::{
    DocumentError, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH, MAX_PATCH_COPY_BYTES,
    MAX_PATCH_OPERATIONS, apply_change, check_document, depth, encoded_len,
};
use pricing_core::entry::{DocChange, Entry, EntryKind, ParseOptions, parse_entry};
use pricing_core::ids::{ItemId, ProductId};
use pricing_core::jws::{Signer, StoredKey, decode_jws_payload};
use pricing_core::model::LogRecord;
use pricing_core::process::apply_record;
use pricing_core::state::{Dirty, InstanceState};
use pricing_core::submit::{MAX_ENTRY_BYTES, SubmitError, prepare};
use pricing_core::time::Timestamp;
use pricing_core::validate::Errors;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Entries of one [`apply`] input that are replayed; a longer log is the same state
/// machine, only slower per execution.
pub const MAX_APPLY_ENTRIES: usize = 64;

/// The time of receipt of every submission (fixed: the harness must be deterministic).
pub fn now() -> Timestamp {
    Timestamp::from_millis(1_779_192_000_000).unwrap_or_else(|| panic!("a valid timestamp"))
}

/// One signing key for the whole process (key generation is slow; signing is not).
pub fn signer() -> &'static Signer {
    static SIGNER: OnceLock<Signer> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let key = StoredKey::generate("fuzz".into(), now())
            .unwrap_or_else(|e| panic!("a signing key: {e}"));
        Signer::from_keys(&[key]).unwrap_or_else(|e| panic!("a signer: {e}"))
    })
}

fn parse(v: &Value, opts: ParseOptions) -> Option<Entry> {
    parse_entry(v, "", opts, &mut Errors::default())
}

// ---------------------------------------------------------------------------------------
// Target 1: the entry parser and the request-level parser (submit::prepare).

/// Parses `data` as a request body and as one JWS. Invariants: no panic; every entry
/// accepted at submission parses again, to the same entry, when the processor replays its
/// stored JWS; signed entries verify and fit [`MAX_ENTRY_BYTES`].
pub fn entry(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = decode_jws_payload(text);
    }
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let list = match &body {
        Value::Array(list) => Some(list),
        Value::Object(map) => map.get("entries").and_then(Value::as_array),
        _ => None,
    };
    for raw in list.into_iter().flatten().take(MAX_APPLY_ENTRIES) {
        check_one_entry(raw);
    }
    check_one_entry(&body);
    check_submission(&body, list);
}

/// One entry (or JWS string) alone: what submission accepts, replay accepts too.
fn check_one_entry(raw: &Value) {
    let payload = match raw {
        Value::String(jws) => match decode_jws_payload(jws) {
            Ok(p) => p,
            Err(_) => return,
        },
        other => other.clone(),
    };
    let submitted = parse(
        &payload,
        ParseOptions {
            now: Some(now()),
            plain: true,
        },
    );
    let replayed = parse(&payload, ParseOptions::default());
    if let Some(submitted) = submitted {
        assert_eq!(
            replayed.as_ref(),
            Some(&submitted),
            "an entry accepted at submission parses differently at replay: {payload}"
        );
        // The log stores the payload as JSON bytes: the same entry must come back.
        let bytes = serde_json::to_vec(&payload).unwrap_or_default();
        let stored: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("a submitted entry does not decode again: {e}"));
        assert_eq!(
            parse(&stored, ParseOptions::default()).as_ref(),
            Some(&submitted),
            "an entry changes through its stored bytes: {payload}"
        );
    }
}

/// The whole request through `submit::prepare`, then every stored JWS as the processor
/// reads it.
fn check_submission(body: &Value, list: Option<&Vec<Value>>) {
    match prepare(body, signer(), now()) {
        Ok(submission) => {
            let Some(list) = list else {
                panic!("a body without an entries array was accepted: {body}");
            };
            assert_eq!(submission.entries.len(), list.len(), "entries lost: {body}");
            for (raw, stored) in list.iter().zip(&submission.entries) {
                let payload = decode_jws_payload(&stored.jwt)
                    .unwrap_or_else(|e| panic!("a stored entry does not decode ({e}): {body}"));
                let replayed = parse(&payload, ParseOptions::default())
                    .unwrap_or_else(|| panic!("an accepted entry is refused at replay: {payload}"));
                match raw {
                    Value::String(jws) => assert_eq!(&stored.jwt, jws, "a client JWS changed"),
                    original => {
                        assert!(signer().verify_jws(&stored.jwt), "a signature fails");
                        let len = serde_json::to_vec(&payload).map_or(usize::MAX, |b| b.len());
                        assert!(len <= MAX_ENTRY_BYTES, "a signed entry has {len} bytes");
                        let submitted = parse(
                            original,
                            ParseOptions {
                                now: Some(now()),
                                plain: true,
                            },
                        );
                        assert_eq!(
                            submitted.map(|e| e.kind),
                            Some(replayed.kind),
                            "the signed entry says something else: {original}"
                        );
                    }
                }
            }
        }
        Err(SubmitError::Invalid(errors)) => assert!(!errors.is_empty(), "a 400 without errors"),
        Err(SubmitError::TooLarge { .. }) => {}
    }
}

// ---------------------------------------------------------------------------------------
// Target 2: JSON Patch and update application (document::apply_change).

/// `[document, change]`. Invariants: no panic; on `Ok` the document is within
/// [`MAX_DOCUMENT_BYTES`] and [`MAX_DOCUMENT_DEPTH`] and decodes again; the result is
/// json-patch's (RFC 6902) wherever json-patch stays within the limits, and a refusal
/// for a failing operation is json-patch's refusal too.
pub fn patch(data: &[u8]) {
    let Ok(Value::Array(parts)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let [doc, change] = parts.as_slice() else {
        return;
    };
    // Stored documents are within the limits; a change starts from one of them.
    if !within_limits(doc) {
        return;
    }
    match change {
        Value::Array(_) => {
            if let Ok(p) = serde_json::from_value::<Patch>(change.clone()) {
                check_patch(doc, p);
            }
        }
        Value::Object(update) => check_update(doc, update),
        _ => {}
    }
}

fn within_limits(doc: &Value) -> bool {
    encoded_len(doc) <= MAX_DOCUMENT_BYTES && depth(doc) <= MAX_DOCUMENT_DEPTH
}

#[track_caller]
fn assert_stored_document(doc: &Value, what: &str) {
    let bytes = encoded_len(doc);
    assert!(
        bytes <= MAX_DOCUMENT_BYTES,
        "{what}: {bytes} bytes, at most {MAX_DOCUMENT_BYTES}"
    );
    let levels = depth(doc);
    assert!(
        levels <= MAX_DOCUMENT_DEPTH,
        "{what}: {levels} levels deep, at most {MAX_DOCUMENT_DEPTH}"
    );
    let encoded = serde_json::to_vec(doc).unwrap_or_else(|e| panic!("{what}: {e}"));
    let decoded: Value =
        serde_json::from_slice(&encoded).unwrap_or_else(|e| panic!("{what} does not decode: {e}"));
    assert_eq!(&decoded, doc, "{what} changes through its stored bytes");
}

/// What json-patch does with the same operations, one at a time, stopped as soon as a
/// limit is passed (so the reference itself stays bounded).
enum Reference {
    Applied(Value),
    Failed,
    OverLimit,
}

fn reference_patch(doc: &Value, ops: &[PatchOperation]) -> Reference {
    if ops.len() > MAX_PATCH_OPERATIONS {
        return Reference::OverLimit;
    }
    let mut doc = doc.clone();
    let mut copied = 0usize;
    for op in ops {
        if let PatchOperation::Copy(c) = op
            && let Some(source) = doc.pointer(c.from.as_str())
        {
            copied = copied.saturating_add(encoded_len(source));
            if copied > MAX_PATCH_COPY_BYTES {
                return Reference::OverLimit;
            }
        }
        if json_patch::patch_unsafe(&mut doc, std::slice::from_ref(op)).is_err() {
            return Reference::Failed;
        }
        if !within_limits(&doc) {
            return Reference::OverLimit;
        }
    }
    Reference::Applied(doc)
}

fn check_patch(doc: &Value, patch: Patch) {
    let reference = reference_patch(doc, &patch.0);
    let mut ours = doc.clone();
    let result = apply_change(&mut ours, &DocChange::Patch(patch.clone()));
    let shown = || format!("document {doc}, patch {}", patch_json(&patch));
    match (&result, reference) {
        (Ok(()), Reference::Applied(expected)) => {
            assert_stored_document(&ours, "a patched document");
            assert_eq!(ours, expected, "not RFC 6902's result: {}", shown());
        }
        (Ok(()), Reference::Failed) => {
            panic!("applied a patch that json-patch refuses: {}", shown())
        }
        (Ok(()), Reference::OverLimit) => {
            assert_stored_document(&ours, "a patched document");
            panic!(
                "applied a patch that passes a limit on the way: {}",
                shown()
            )
        }
        (Err(e), Reference::Applied(_)) => {
            // Within every limit at every step: only a limit refusal that over-approximates
            // (an operation refused before it runs) would be tolerable, and none is expected.
            panic!(
                "refused ({e}) a patch json-patch applies within the limits: {}",
                shown()
            )
        }
        (Err(DocumentError::Patch(_)), Reference::Failed) => {}
        (Err(DocumentError::Patch(e)), Reference::OverLimit) => {
            panic!("missed a limit and failed later ({e}): {}", shown())
        }
        // A limit may refuse an operation that would have failed anyway.
        (Err(_), Reference::Failed | Reference::OverLimit) => {}
    }
}

fn patch_json(patch: &Patch) -> Value {
    serde_json::to_value(patch).unwrap_or(Value::Null)
}

fn check_update(doc: &Value, update: &Map<String, Value>) {
    let mut ours = doc.clone();
    let result = apply_change(&mut ours, &DocChange::Update(update.clone()));
    let Value::Object(map) = doc else {
        assert_eq!(result, Err(DocumentError::NotAnObject));
        return;
    };
    let mut expected = map.clone();
    for (k, v) in update {
        if v.is_null() {
            expected.remove(k);
        } else {
            expected.insert(k.clone(), v.clone());
        }
    }
    let expected = Value::Object(expected);
    match result {
        Ok(()) => {
            assert_stored_document(&ours, "an updated document");
            assert_eq!(ours, expected, "not a shallow merge: {doc} + {update:?}");
        }
        Err(DocumentError::TooLarge { .. } | DocumentError::TooDeep { .. }) => {
            assert!(!within_limits(&expected), "refused a valid update: {doc}");
        }
        Err(e) => panic!("unexpected refusal of an update ({e}): {doc}"),
    }
}

// ---------------------------------------------------------------------------------------
// Target 3: the apply step (process::apply_record -> InstanceState::apply_logged).

/// A compact JWS around `payload`, as the log stores it. The processor does not verify
/// signatures, so a fixed one saves the ECDSA work.
pub fn unsigned_jws(payload: &Value) -> String {
    let bytes = serde_json::to_vec(payload).unwrap_or_default();
    format!(
        "eyJhbGciOiJFUzI1NiIsImtpZCI6ImZ1enoifQ.{}.c2ln",
        URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// What the harness tracks beside the state, to check the counts.
#[derive(Default)]
struct Model {
    /// Net units of the accepted sales and returns per item, unsaturated (a sale that
    /// would take it past `u64::MAX` is rejected, `outOfRange`).
    sold: BTreeMap<ItemId, i128>,
    removed: BTreeSet<ItemId>,
    products: BTreeSet<ProductId>,
}

/// Replays up to [`MAX_APPLY_ENTRIES`] entries from an empty instance. Invariants after
/// every entry: no panic; `applied_seq` follows the log; a rejected entry changes nothing
/// else; an accepted one changes only records it marks dirty; every stored document
/// (meta, metadata, properties) is within the limits and every record decodes again;
/// sold is the net of the accepted sales (so never negative), removed items stay removed,
/// products are never created implicitly; counts are consistent.
pub fn apply(data: &[u8]) {
    let Ok(Value::Array(list)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut state = InstanceState::default();
    let mut model = Model::default();
    for (i, raw) in list.iter().take(MAX_APPLY_ENTRIES).enumerate() {
        let sequence = i as u64 + 1;
        let jwt = match raw {
            Value::String(jws) => jws.clone(),
            other => unsigned_jws(other),
        };
        let record = LogRecord {
            sequence,
            transaction_id: None,
            received_at: now(),
            jwt,
        };
        let before = state.clone();
        let mut dirty = Dirty::default();
        let result = apply_record(&mut state, &record, &mut dirty);
        assert_eq!(state.header.applied_seq, sequence, "applied_seq");
        assert!(dirty.header, "the header (applied_seq) is not marked dirty");
        match result {
            Err(_) => {
                let mut expected = before;
                expected.header.applied_seq = sequence;
                assert_eq!(state, expected, "a rejected entry changed the state: {raw}");
            }
            Ok(()) => {
                let entry = decode_jws_payload(&record.jwt)
                    .ok()
                    .and_then(|p| parse(&p, ParseOptions::default()))
                    .unwrap_or_else(|| panic!("applied an entry that does not parse: {raw}"));
                model.accept(&entry);
                check_only_dirty_changed(&before, &state, &dirty, raw);
            }
        }
        check_state(&state, &model, &dirty);
    }
}

impl Model {
    fn accept(&mut self, entry: &Entry) {
        match &entry.kind {
            EntryKind::ProductRegistration(r) => {
                self.products.insert(r.product_id.clone());
            }
            EntryKind::ItemSale(sale) => {
                let net = self.sold.entry(sale.item_id.clone()).or_default();
                *net += i128::from(sale.quantity);
            }
            EntryKind::ItemRemoval { item_id } => {
                self.removed.insert(item_id.clone());
            }
            _ => {}
        }
    }
}

fn check_only_dirty_changed(
    before: &InstanceState,
    after: &InstanceState,
    dirty: &Dirty,
    raw: &Value,
) {
    for (id, item) in &after.items {
        if !dirty.items.contains(id) {
            assert_eq!(
                before.items.get(id),
                Some(item),
                "item {id} changed, not dirty: {raw}"
            );
        }
    }
    for (id, product) in &after.products {
        if !dirty.products.contains(id) {
            assert_eq!(
                before.products.get(id),
                Some(product),
                "product {id} changed, not dirty: {raw}"
            );
        }
    }
    assert!(
        before.items.keys().all(|id| after.items.contains_key(id)),
        "an item vanished"
    );
    assert!(
        before
            .products
            .keys()
            .all(|id| after.products.contains_key(id)),
        "a product vanished"
    );
}

#[track_caller]
fn assert_document_map(doc: &Map<String, Value>, what: &str) {
    if let Err(e) = check_document(doc) {
        panic!("{what} is stored beyond the limits: {e}");
    }
    assert_stored_document(&Value::Object(doc.clone()), what);
}

#[track_caller]
fn assert_props<T: Serialize>(props: &T, what: &str) {
    match serde_json::to_value(props) {
        Ok(Value::Object(doc)) => assert_document_map(&doc, what),
        other => panic!("{what} is not an object: {other:?}"),
    }
}

#[track_caller]
fn assert_round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    record: &T,
    what: &str,
) {
    let bytes = serde_json::to_vec(record).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back: T =
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{what} does not decode: {e}"));
    assert_eq!(&back, record, "{what} changes through its stored bytes");
}

fn check_state(state: &InstanceState, model: &Model, dirty: &Dirty) {
    assert_document_map(&state.header.meta, "the instance meta");
    assert_round_trip(&state.header, "the header");
    for (id, item) in &state.items {
        assert_eq!(&item.item_id, id, "an item under another id");
        assert_document_map(&item.metadata.to_map(), "item metadata");
        assert_props(&item.properties, "item properties");
        assert!(
            model.products.contains(&item.product_id),
            "item {id} belongs to unregistered product {}",
            item.product_id
        );
        assert_eq!(
            item.removed,
            model.removed.contains(id),
            "item {id}: removed is {}",
            item.removed
        );
        let net = model.sold.get(id).copied().unwrap_or(0);
        assert!(net >= 0, "item {id}: the accepted sales net {net} units");
        assert_eq!(i128::from(item.sold), net, "item {id}: sold");
        if dirty.items.contains(id) {
            assert_round_trip(item, "an item record");
        }
    }
    for (id, product) in &state.products {
        assert_eq!(&product.product_id, id, "a product under another id");
        assert_document_map(&product.metadata, "product metadata");
        assert_props(&product.properties, "product properties");
        if dirty.products.contains(id) {
            assert_round_trip(product, "a product record");
        }
    }
    assert_eq!(
        state.products.keys().cloned().collect::<BTreeSet<_>>(),
        model.products,
        "products created implicitly or lost"
    );
    let totals = state.product_totals();
    for product in state.products.values() {
        let t = totals.get(&product.product_id).copied().unwrap_or_default();
        let c = InstanceState::product_counts(product, &t);
        assert!(c.available == 0 || c.oversold == 0, "product counts {c:?}");
    }
    for item in state.items.values() {
        let c = state.item_counts(item, &totals);
        assert_eq!(c.sold, item.sold, "item counts");
        assert!(c.available == 0 || c.oversold == 0, "item counts {c:?}");
    }
}
