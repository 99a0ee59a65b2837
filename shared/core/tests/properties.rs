//! Property tests of the state machine: generated sequences of entries over small id sets.
//!
//! 1. Counts stay consistent: available is max(0, ...), never both available and oversold,
//!    sold matches the accepted sales and returns (it never underflows).
//! 2. Replaying a log gives the same state, also when the state is saved and loaded (JSON)
//!    between chunks, as after a crash.
//! 3. Idempotent entries applied twice in a row change nothing.
//! 4. The processor over a log and a store that fail commits at random ends, after re-runs,
//!    exactly where a clean run ends: same state, same events, no lost or doubled rejection.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pricing_core::entry::{Entry, EntryKind, ParseOptions, parse_entry};
use pricing_core::ids::{InstanceId, InstanceKey, ItemId, ProductId, ProjectId, TransactionId};
use pricing_core::model::{AppendOutcome, Event, LogRecord, NewEntry};
use pricing_core::ports::{Commit, EntryLog, StateStore, StoreError, StoreResult};
use pricing_core::process::{Processor, apply_record};
use pricing_core::state::{
    Dirty, Header, InstanceState, ItemState, ProductState, Rejection, rejection_codes,
};
use pricing_core::time::Timestamp;
use pricing_core::validate::Errors;
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Generated entries.

const PRODUCTS: usize = 3;
const ITEMS: usize = 6;

#[derive(Debug, Clone)]
enum Op {
    Product {
        p: usize,
        capacity: Option<u64>,
        strict: bool,
    },
    Item {
        i: usize,
        p: usize,
        quantity: Option<u64>,
        strict: bool,
    },
    Remove {
        i: usize,
    },
    Sale {
        i: usize,
        quantity: i64,
        cents: u32,
        pool: bool,
    },
    Quantity {
        i: usize,
        total: u64,
    },
    ReserveItem {
        i: usize,
        reserved: u64,
    },
    ReserveProduct {
        p: usize,
        reserved: u64,
    },
    /// May break the price bounds (a semantic rejection).
    ItemDefault {
        i: usize,
        cents: u32,
    },
    ItemMeta {
        i: usize,
        key: u8,
    },
    /// May fail (test op).
    ItemMetaTest {
        i: usize,
        key: u8,
    },
    ProductCapacity {
        p: usize,
        capacity: u64,
    },
    ProductZone {
        p: usize,
        zone: u8,
    },
    MetaDate,
    MetaNote {
        main: bool,
    },
    /// Copies the note into the tags of the first date: rejected unless it is `main`.
    MetaCopyNoteToTags,
    Schedule {
        minutes: u16,
    },
    Actions {
        enable: u8,
        disable: u8,
    },
}

fn item_name(i: usize) -> String {
    format!("i{i}")
}

fn product_name(p: usize) -> String {
    format!("p{p}")
}

fn item_registration(item: &str, p: usize, quantity: Option<u64>, strict: bool) -> Value {
    let mut data = json!({
        "itemId": item,
        "productId": product_name(p),
        "salesPeriod": {"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
        "priceSettings": {"min": 10, "max": 100, "default": 50},
        "strict": strict
    });
    if let Some(q) = quantity {
        data["quantity"] = json!(q);
    }
    json!({"type": "itemRegistration", "data": data})
}

impl Op {
    fn to_json(&self) -> Value {
        match *self {
            Op::Product {
                p,
                capacity,
                strict,
            } => {
                let mut data = json!({"productId": product_name(p), "strict": strict});
                if let Some(c) = capacity {
                    data["capacity"] = json!(c);
                }
                json!({"type": "productRegistration", "data": data})
            }
            Op::Item {
                i,
                p,
                quantity,
                strict,
            } => item_registration(&item_name(i), p, quantity, strict),
            Op::Remove { i } => json!({"type": "itemRemoval", "data": {"itemId": item_name(i)}}),
            Op::Sale {
                i,
                quantity,
                cents,
                pool,
            } => json!({"type": "itemSale", "data": {
                "itemId": item_name(i), "quantity": quantity, "price": f64::from(cents) / 100.0, "pool": pool
            }}),
            Op::Quantity { i, total } => {
                json!({"type": "itemQuantity", "data": {"itemId": item_name(i), "total": total}})
            }
            Op::ReserveItem { i, reserved } => {
                json!({"type": "itemReservation", "data": {"itemId": item_name(i), "reserved": reserved}})
            }
            Op::ReserveProduct { p, reserved } => {
                json!({"type": "itemReservation", "data": {"productId": product_name(p), "reserved": reserved}})
            }
            Op::ItemDefault { i, cents } => json!({"type": "itemProperties", "data": {
                "itemId": item_name(i),
                "patch": [{"op": "replace", "path": "/priceSettings/default", "value": f64::from(cents) / 100.0}]
            }}),
            Op::ItemMeta { i, key } => json!({"type": "itemMetadata", "data": {
                "itemId": item_name(i),
                "patch": [{"op": "add", "path": format!("/k{key}"), "value": key}]
            }}),
            Op::ItemMetaTest { i, key } => json!({"type": "itemMetadata", "data": {
                "itemId": item_name(i),
                "patch": [{"op": "test", "path": format!("/k{key}"), "value": key}, {"op": "remove", "path": format!("/k{key}")}]
            }}),
            Op::ProductCapacity { p, capacity } => json!({"type": "productProperties", "data": {
                "productId": product_name(p),
                "patch": [{"op": "add", "path": "/capacity", "value": capacity}]
            }}),
            Op::ProductZone { p, zone } => json!({"type": "productMetadata", "data": {
                "productId": product_name(p),
                "update": {"zone": format!("zone-{zone}")}
            }}),
            Op::MetaDate => json!({"type": "instanceMetadata", "data": {"patch": [
                {"op": "add", "path": "/dates", "value": [{"date": {"start": "2026-06-20T18:00:00Z", "end": "2026-06-20T22:00:00Z"}, "tags": ["main"]}]}
            ]}}),
            Op::MetaNote { main } => {
                let note = if main { "main" } else { "vip" };
                json!({"type": "instanceMetadata", "data": {"update": {"note": note}}})
            }
            Op::MetaCopyNoteToTags => json!({"type": "instanceMetadata", "data": {"patch": [
                {"op": "copy", "from": "/note", "path": "/dates/0/tags/-"}
            ]}}),
            Op::Schedule { minutes } => json!({"type": "pricingSchedule", "data": {
                "interval": format!("PT{minutes}M")
            }}),
            Op::Actions { enable, disable } => {
                json!({"type": "instanceActions", "data": {"actions": [
                    {"action": "enable", "date": format!("2026-06-{:02}T00:00:00Z", enable)},
                    {"action": "disable", "date": format!("2026-06-{:02}T00:00:00Z", disable)}
                ]}})
            }
        }
    }

    fn entry(&self) -> Entry {
        parse(&self.to_json())
    }

    /// Entries that give the same state when applied twice in a row.
    fn is_idempotent(&self) -> bool {
        match self {
            Op::Product { strict, .. } | Op::Item { strict, .. } => !strict,
            Op::Quantity { .. } | Op::ReserveItem { .. } | Op::ReserveProduct { .. } => true,
            _ => false,
        }
    }
}

fn parse(v: &Value) -> Entry {
    let mut errors = Errors::default();
    let entry = parse_entry(v, "", ParseOptions::default(), &mut errors);
    assert!(
        errors.is_empty(),
        "generated an invalid entry {v}: {:?}",
        errors.list
    );
    entry.unwrap_or_else(|| panic!("no entry for {v}"))
}

fn idempotent_op() -> impl Strategy<Value = Op> {
    let item = 0..ITEMS;
    let product = 0..PRODUCTS;
    prop_oneof![
        (product.clone(), prop::option::of(0u64..40)).prop_map(|(p, capacity)| Op::Product {
            p,
            capacity,
            strict: false
        }),
        (item.clone(), product.clone(), prop::option::of(0u64..30)).prop_map(|(i, p, quantity)| {
            Op::Item {
                i,
                p,
                quantity,
                strict: false,
            }
        }),
        (item.clone(), 0u64..40).prop_map(|(i, total)| Op::Quantity { i, total }),
        (item, 0u64..8).prop_map(|(i, reserved)| Op::ReserveItem { i, reserved }),
        (product, 0u64..8).prop_map(|(p, reserved)| Op::ReserveProduct { p, reserved }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let item = 0..ITEMS;
    let product = 0..PRODUCTS;
    let quantity = prop_oneof![1i64..6, -4i64..0, Just(20i64)];
    prop_oneof![
        2 => (product.clone(), prop::option::of(0u64..40), prop::bool::weighted(0.2)).prop_map(
            |(p, capacity, strict)| Op::Product { p, capacity, strict }
        ),
        3 => (item.clone(), product.clone(), prop::option::of(0u64..30), prop::bool::weighted(0.2))
            .prop_map(|(i, p, quantity, strict)| Op::Item { i, p, quantity, strict }),
        1 => item.clone().prop_map(|i| Op::Remove { i }),
        12 => (item.clone(), quantity, 0u32..20_000, prop::bool::weighted(0.3))
            .prop_map(|(i, quantity, cents, pool)| Op::Sale { i, quantity, cents, pool }),
        3 => (item.clone(), 0u64..40).prop_map(|(i, total)| Op::Quantity { i, total }),
        3 => (item.clone(), 0u64..8).prop_map(|(i, reserved)| Op::ReserveItem { i, reserved }),
        2 => (product.clone(), 0u64..8).prop_map(|(p, reserved)| Op::ReserveProduct { p, reserved }),
        2 => (item.clone(), 0u32..15_000).prop_map(|(i, cents)| Op::ItemDefault { i, cents }),
        1 => (item.clone(), 0u8..3).prop_map(|(i, key)| Op::ItemMeta { i, key }),
        1 => (item, 0u8..3).prop_map(|(i, key)| Op::ItemMetaTest { i, key }),
        1 => (product.clone(), 0u64..40).prop_map(|(p, capacity)| Op::ProductCapacity { p, capacity }),
        1 => (product, 0u8..3).prop_map(|(p, zone)| Op::ProductZone { p, zone }),
        1 => Just(Op::MetaDate),
        1 => any::<bool>().prop_map(|main| Op::MetaNote { main }),
        1 => Just(Op::MetaCopyNoteToTags),
        1 => (1u16..120).prop_map(|minutes| Op::Schedule { minutes }),
        1 => (1u8..29, 1u8..29).prop_map(|(enable, disable)| Op::Actions { enable, disable }),
    ]
}

/// Products p0 (capacity 20) and p1 (no capacity), items i0..i3; p2, i4 and i5 are left to
/// the generated entries (and unknown until then).
fn prefix() -> Vec<Op> {
    let mut ops = vec![
        Op::Product {
            p: 0,
            capacity: Some(20),
            strict: false,
        },
        Op::Product {
            p: 1,
            capacity: None,
            strict: false,
        },
    ];
    for i in 0..4 {
        ops.push(Op::Item {
            i,
            p: i % 2,
            quantity: (i % 2 == 1).then_some(10),
            strict: false,
        });
    }
    ops
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 0..80).prop_map(|tail| {
        let mut all = prefix();
        all.extend(tail);
        all
    })
}

// ---------------------------------------------------------------------------------------
// Folding.

type Outcome = Result<(), Rejection>;

/// Applies `entries` with sequences after the state's applied sequence.
fn fold_into(state: &mut InstanceState, entries: &[Entry]) -> Vec<Outcome> {
    entries
        .iter()
        .map(|e| {
            let mut dirty = Dirty::default();
            let seq = state.header.applied_seq + 1;
            state.apply_logged(e, seq, &mut dirty)
        })
        .collect()
}

fn fold(entries: &[Entry]) -> (InstanceState, Vec<Outcome>) {
    let mut state = InstanceState::default();
    let outcomes = fold_into(&mut state, entries);
    (state, outcomes)
}

fn reload(state: &InstanceState) -> InstanceState {
    let text = serde_json::to_string(state).expect("serializable");
    serde_json::from_str(&text).expect("deserializable")
}

/// The state without the per-record sequences (which differ between a first and a repeated
/// application of the same entry).
fn without_sequences(state: &InstanceState) -> InstanceState {
    let mut s = state.clone();
    s.header.applied_seq = 0;
    for item in s.items.values_mut() {
        item.seq = 0;
    }
    for product in s.products.values_mut() {
        product.seq = 0;
    }
    s
}

// ---------------------------------------------------------------------------------------
// Property 1: counts.

/// What is left of a product, computed here from the records alone.
fn product_raw(state: &InstanceState, id: &ProductId) -> Option<i128> {
    let product = &state.products[id];
    let all: Vec<&ItemState> = state
        .items
        .values()
        .filter(|i| &i.product_id == id)
        .collect();
    let live: Vec<&ItemState> = all.iter().copied().filter(|i| !i.removed).collect();
    // A removed item's units sold stay sold (and under a legacy capacity keep the part of
    // its quantity they took); its reservations hold nothing.
    let sold: i128 = all.iter().map(|i| i128::from(i.sold)).sum();
    let reserved: i128 =
        live.iter().map(|i| i128::from(i.reserved)).sum::<i128>() + i128::from(product.reserved);
    let legacy = all
        .iter()
        .filter_map(|i| {
            let q = i.legacy_quantity?;
            match i.removed {
                false => Some(q),
                true => (i.sold > 0).then(|| q.min(i.sold)),
            }
        })
        .map(i128::from)
        .reduce(|a, b| a + b);
    let capacity = product.properties.capacity.map(i128::from).or(legacy)?;
    Some(capacity - sold - reserved)
}

fn check_counts(state: &InstanceState) -> Result<(), TestCaseError> {
    let totals = state.product_totals();
    for product in state.products.values() {
        let t = totals
            .get(&product.product_id)
            .copied()
            .ok_or_else(|| TestCaseError::fail("a product without totals"))?;
        let c = InstanceState::product_counts(product, &t);
        let raw = product_raw(state, &product.product_id).unwrap_or(0);
        prop_assert_eq!(i128::from(c.available), raw.max(0));
        prop_assert_eq!(i128::from(c.oversold), (-raw).max(0));
        prop_assert!(c.available == 0 || c.oversold == 0);
        let sold: u64 = state
            .items
            .values()
            .filter(|i| i.product_id == product.product_id)
            .map(|i| i.sold)
            .sum();
        prop_assert_eq!(c.sold, sold);
    }
    for item in state.items.values().filter(|i| !i.removed) {
        let c = state.item_counts(item, &totals);
        let own = item
            .total
            .map(|t| i128::from(t) - i128::from(item.sold) - i128::from(item.reserved));
        let product = product_raw(state, &item.product_id);
        let raw = match (own, product) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(0),
        };
        prop_assert_eq!(i128::from(c.available), raw.max(0), "item {}", item.item_id);
        prop_assert_eq!(
            i128::from(c.oversold),
            (-raw).max(0),
            "item {}",
            item.item_id
        );
        prop_assert!(c.available == 0 || c.oversold == 0);
        prop_assert_eq!((c.sold, c.reserved), (item.sold, item.reserved));
        if let Some(p) = product {
            prop_assert!(
                i128::from(c.available) <= p.max(0),
                "an item beyond its product"
            );
        }
        if let Some(total) = item.total {
            prop_assert!(c.available <= total);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Property 4: fakes of the ports.

#[derive(Default)]
struct FakeLog {
    records: Mutex<HashMap<InstanceKey, Vec<LogRecord>>>,
}

impl FakeLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceKey, Vec<LogRecord>>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl EntryLog for FakeLog {
    async fn append(
        &self,
        key: &InstanceKey,
        entries: Vec<NewEntry>,
    ) -> StoreResult<Vec<AppendOutcome>> {
        let mut all = self.lock();
        let log = all.entry(key.clone()).or_default();
        let mut outcomes = Vec::with_capacity(entries.len());
        for e in entries {
            let seen = e.transaction_id.as_ref().and_then(|t| {
                log.iter()
                    .find(|r| r.transaction_id.as_ref() == Some(t))
                    .map(|r| r.sequence)
            });
            if let Some(sequence) = seen {
                outcomes.push(AppendOutcome::Duplicate { sequence });
                continue;
            }
            let sequence = log.len() as u64 + 1;
            log.push(LogRecord {
                sequence,
                transaction_id: e.transaction_id,
                received_at: e.received_at,
                jwt: e.jwt,
            });
            outcomes.push(AppendOutcome::Accepted { sequence });
        }
        Ok(outcomes)
    }

    async fn read(
        &self,
        key: &InstanceKey,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<LogRecord>> {
        Ok(self
            .lock()
            .get(key)
            .map(|log| {
                log.iter()
                    .filter(|r| r.sequence > after)
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn last_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        Ok(self.lock().get(key).map_or(0, |log| log.len() as u64))
    }
}

/// How the next commit fails, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Unavailable, nothing written.
    Before,
    /// Written, but the caller hears Unavailable (a timeout after the write).
    After,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Stored {
    header: Header,
    items: BTreeMap<ItemId, ItemState>,
    products: BTreeMap<ProductId, ProductState>,
    events: Vec<Event>,
}

#[derive(Default)]
struct FakeStore {
    states: Mutex<HashMap<InstanceKey, Stored>>,
    faults: Mutex<VecDeque<Fault>>,
}

impl FakeStore {
    fn with_faults(faults: Vec<Fault>) -> Self {
        FakeStore {
            states: Mutex::default(),
            faults: Mutex::new(faults.into()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceKey, Stored>> {
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_fault(&self) -> Fault {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
            .unwrap_or(Fault::None)
    }

    fn stored(&self, key: &InstanceKey) -> Stored {
        self.lock().get(key).cloned().unwrap_or_default()
    }
}

impl StateStore for FakeStore {
    async fn load_state(&self, key: &InstanceKey) -> StoreResult<InstanceState> {
        let stored = self.stored(key);
        Ok(InstanceState {
            header: stored.header,
            items: stored.items,
            products: stored.products,
        })
    }

    async fn applied_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        Ok(self.lock().get(key).map_or(0, |s| s.header.applied_seq))
    }

    async fn commit(&self, key: &InstanceKey, commit: Commit) -> StoreResult<()> {
        let fault = self.next_fault();
        if fault == Fault::Before {
            return Err(StoreError::Unavailable("injected before the write".into()));
        }
        {
            let mut all = self.lock();
            let stored = all.entry(key.clone()).or_default();
            if stored.header.applied_seq != commit.expected_applied {
                return Err(StoreError::Conflict(format!(
                    "applied {} != expected {}",
                    stored.header.applied_seq, commit.expected_applied
                )));
            }
            stored.header = commit.header;
            for item in commit.items {
                stored.items.insert(item.item_id.clone(), item);
            }
            for product in commit.products {
                stored.products.insert(product.product_id.clone(), product);
            }
            stored.events.extend(commit.events);
        }
        if fault == Fault::After {
            return Err(StoreError::Unavailable("injected after the write".into()));
        }
        Ok(())
    }
}

fn key() -> InstanceKey {
    InstanceKey::new(
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
        ProjectId::parse("proj").expect("valid"),
        InstanceId::parse("inst").expect("valid"),
    )
}

fn now() -> Timestamp {
    Timestamp::parse("2026-05-19T12:00:00Z").expect("valid")
}

/// A stored entry as the log holds it. The processor does not verify signatures, so a
/// placeholder signature keeps the property tests fast.
fn new_entry(v: &Value, transaction_id: Option<String>) -> NewEntry {
    NewEntry {
        transaction_id: transaction_id.map(|t| TransactionId::parse(t).expect("valid")),
        received_at: now(),
        jwt: format!(
            "eyJhbGciOiJFUzI1NiIsImtpZCI6InRlc3QifQ.{}.c2lnbmF0dXJl",
            URL_SAFE_NO_PAD.encode(v.to_string())
        ),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

/// Processes until a run succeeds; returns the number of failed runs.
async fn process_until_done(
    processor: &Processor,
    log: &FakeLog,
    store: &FakeStore,
) -> Result<usize, TestCaseError> {
    for failures in 0..10_000 {
        match processor.process(log, store, &key(), now()).await {
            Ok(report) => {
                let last = log.last_sequence(&key()).await.map_err(fail)?;
                prop_assert_eq!(report.applied_seq, last);
                return Ok(failures);
            }
            Err(StoreError::Unavailable(_)) => continue,
            Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
        }
    }
    Err(TestCaseError::fail("never succeeded"))
}

fn fail(e: StoreError) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// The sequences named in the stored `entries.rejected` events, in order.
fn rejected_sequences(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.event_type == "entries.rejected")
        .flat_map(|e| {
            e.data["errors"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|x| x["sequence"].as_u64())
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Scenario {
    /// Items registered up front (so that commits must be split).
    bulk: usize,
    ops: Vec<Op>,
    /// Transaction id of each op, from a small set (so that the log deduplicates).
    ids: Vec<Option<u8>>,
    /// Entries appended before each processing.
    batches: Vec<usize>,
    faults: Vec<Fault>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let fault = prop_oneof![
        3 => Just(Fault::None),
        2 => Just(Fault::Before),
        1 => Just(Fault::After),
    ];
    (
        prop_oneof![Just(0usize), 1usize..20, 80usize..200],
        ops(),
        prop::collection::vec(prop::option::weighted(0.3, 0u8..20), 0..90),
        prop::collection::vec(1usize..60, 1..5),
        prop::collection::vec(fault, 0..40),
    )
        .prop_map(|(bulk, ops, ids, batches, faults)| Scenario {
            bulk,
            ops,
            ids,
            batches,
            faults,
        })
}

impl Scenario {
    fn entries(&self) -> Vec<NewEntry> {
        let mut out: Vec<NewEntry> = Vec::new();
        out.push(new_entry(
            &Op::Product {
                p: 0,
                capacity: Some(1000),
                strict: false,
            }
            .to_json(),
            None,
        ));
        for b in 0..self.bulk {
            out.push(new_entry(
                &item_registration(&format!("bulk{b}"), 0, None, false),
                None,
            ));
        }
        for (n, op) in self.ops.iter().enumerate() {
            let id = self
                .ids
                .get(n)
                .copied()
                .flatten()
                .map(|t| format!("tx-{t}"));
            out.push(new_entry(&op.to_json(), id));
        }
        out
    }

    /// The entries in append batches; the last batch takes the rest.
    fn batched(&self) -> Vec<Vec<NewEntry>> {
        let mut rest = self.entries();
        let mut out = Vec::new();
        for &size in &self.batches {
            if rest.is_empty() {
                break;
            }
            let tail = rest.split_off(size.min(rest.len()));
            out.push(std::mem::replace(&mut rest, tail));
        }
        if !rest.is_empty() {
            out.push(rest);
        }
        out
    }
}

/// Appends the batches and processes after each one; returns what the store holds.
async fn run_scenario(
    batches: &[Vec<NewEntry>],
    faults: Vec<Fault>,
) -> Result<(FakeLog, Stored, usize), TestCaseError> {
    let log = FakeLog::default();
    let store = FakeStore::with_faults(faults);
    let processor = Processor::new();
    let mut failures = 0;
    for batch in batches {
        log.append(&key(), batch.clone()).await.map_err(fail)?;
        failures += process_until_done(&processor, &log, &store).await?;
    }
    // Nothing new: a further run commits nothing and changes nothing.
    let before = store.stored(&key());
    process_until_done(&processor, &log, &store).await?;
    prop_assert_eq!(&store.stored(&key()), &before);
    // A fresh processor (no warm cache) agrees.
    process_until_done(&Processor::new(), &log, &store).await?;
    prop_assert_eq!(&store.stored(&key()), &before);
    Ok((log, before, failures))
}

// ---------------------------------------------------------------------------------------
// The properties.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// (1) Counts never go negative and sold never underflows.
    #[test]
    fn counts_stay_consistent(ops in ops()) {
        let mut state = InstanceState::default();
        let mut sold: BTreeMap<ItemId, i128> = BTreeMap::new();
        for op in &ops {
            let entry = op.entry();
            let before = state.clone();
            let mut dirty = Dirty::default();
            let seq = state.header.applied_seq + 1;
            let outcome = state.apply_logged(&entry, seq, &mut dirty);
            if let EntryKind::ItemSale(sale) = &entry.kind {
                let model = sold.entry(sale.item_id.clone()).or_insert(0);
                match &outcome {
                    Ok(()) => {
                        *model += i128::from(sale.quantity);
                        prop_assert!(*model >= 0, "sold would underflow");
                    }
                    Err(r) if r.code == rejection_codes::RETURN_EXCEEDS_SOLD => {
                        prop_assert!(*model + i128::from(sale.quantity) < 0);
                    }
                    Err(r) => prop_assert!(
                        r.code == rejection_codes::UNKNOWN_ITEM
                            || r.code == rejection_codes::ITEM_REMOVED,
                        "unexpected rejection of a sale: {:?}", r
                    ),
                }
            }
            if outcome.is_err() {
                let mut expected = before;
                expected.header.applied_seq = seq;
                prop_assert_eq!(&state, &expected, "a rejected entry changed the state");
            }
            for (id, item) in &state.items {
                prop_assert_eq!(
                    i128::from(item.sold),
                    sold.get(id).copied().unwrap_or(0),
                    "sold of {}", id
                );
            }
            check_counts(&state)?;
        }
    }

    /// (2) Replaying the log gives the same state, with a save and reload between chunks.
    #[test]
    fn replay_in_chunks_with_reloads_gives_the_same_state(
        ops in ops(),
        chunks in prop::collection::vec(1usize..15, 1..12),
    ) {
        let entries: Vec<Entry> = ops.iter().map(Op::entry).collect();
        let (whole, outcomes) = fold(&entries);
        let mut state = InstanceState::default();
        let mut chunked_outcomes = Vec::new();
        let mut rest: &[Entry] = &entries;
        let mut sizes = chunks.iter().cycle();
        while !rest.is_empty() {
            let size = sizes.next().copied().unwrap_or(1).min(rest.len());
            let (chunk, tail) = rest.split_at(size);
            chunked_outcomes.extend(fold_into(&mut state, chunk));
            state = reload(&state);
            rest = tail;
        }
        prop_assert_eq!(&state, &whole);
        prop_assert_eq!(chunked_outcomes, outcomes);
        prop_assert_eq!(state.header.applied_seq, entries.len() as u64);
    }

    /// (3) Idempotent entries applied twice in a row equal once.
    #[test]
    fn duplicates_change_nothing(ops in ops(), dup in idempotent_op()) {
        prop_assert!(dup.is_idempotent());
        let entries: Vec<Entry> = ops.iter().map(Op::entry).collect();
        let (base, _) = fold(&entries);
        let entry = dup.entry();
        let seq = base.header.applied_seq + 1;
        let mut once = base.clone();
        let first = once.apply_logged(&entry, seq, &mut Dirty::default());
        // The same record delivered twice (same sequence).
        let mut twice = once.clone();
        let mut dirty = Dirty::default();
        let second = twice.apply_logged(&entry, seq, &mut dirty);
        prop_assert_eq!(&twice, &once);
        prop_assert_eq!(&second, &first);
        // The same entry submitted twice without a transaction id (next sequence).
        let mut again = once.clone();
        let third = again.apply_logged(&entry, seq + 1, &mut Dirty::default());
        prop_assert_eq!(without_sequences(&again), without_sequences(&once));
        prop_assert_eq!(third.is_ok(), first.is_ok());
    }

    /// (4) A processor whose commits fail at random ends where a clean run ends.
    #[test]
    fn processing_with_failing_commits_equals_a_clean_run(scenario in scenario()) {
        let rt = runtime();
        let batches = scenario.batched();
        let (clean_log, clean, clean_failures) =
            rt.block_on(run_scenario(&batches, Vec::new()))?;
        prop_assert_eq!(clean_failures, 0);
        let (_, faulty, _) = rt.block_on(run_scenario(&batches, scenario.faults.clone()))?;
        prop_assert_eq!(&faulty.header, &clean.header);
        prop_assert_eq!(&faulty.items, &clean.items);
        prop_assert_eq!(&faulty.products, &clean.products);
        prop_assert_eq!(&faulty.events, &clean.events);

        // Both equal the pure fold of the log, and every rejection is reported exactly once.
        let records = rt.block_on(clean_log.read(&key(), 0, usize::MAX)).map_err(fail)?;
        let mut state = InstanceState::default();
        let mut rejected = Vec::new();
        for record in &records {
            if let Err(r) = apply_record(&mut state, record, &mut Dirty::default()) {
                rejected.push(r.sequence);
            }
        }
        prop_assert_eq!(&clean.header, &state.header);
        prop_assert_eq!(&clean.items, &state.items);
        prop_assert_eq!(&clean.products, &state.products);
        prop_assert_eq!(rejected_sequences(&faulty.events), rejected);
        let mut ids: Vec<&str> = faulty.events.iter().map(|e| e.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), faulty.events.len(), "event ids are unique");
    }
}

#[test]
fn commits_are_split_for_large_tails() {
    // 200 new items in one tail: more records than one atomic commit may hold.
    let scenario = Scenario {
        bulk: 200,
        ops: Vec::new(),
        ids: Vec::new(),
        batches: vec![500],
        faults: vec![Fault::None, Fault::Before, Fault::After, Fault::Before],
    };
    let rt = runtime();
    let log = FakeLog::default();
    let store = FakeStore::with_faults(Vec::new());
    let report = rt
        .block_on(async {
            log.append(&key(), scenario.entries()).await?;
            Processor::new().process(&log, &store, &key(), now()).await
        })
        .expect("processed");
    assert_eq!(report.applied, 201);
    assert!(report.commits >= 3, "{report:?}");
    assert_eq!(store.stored(&key()).items.len(), 200);
    // The same tail through failing commits.
    let faulty = rt
        .block_on(run_scenario(&scenario.batched(), scenario.faults.clone()))
        .expect("processed");
    assert_eq!(faulty.1.items, store.stored(&key()).items);
    assert!(faulty.2 >= 3, "the injected faults were hit");
}

#[test]
fn the_log_deduplicates_by_transaction_id() {
    let rt = runtime();
    let log = FakeLog::default();
    let e = |t: &str| new_entry(&Op::Remove { i: 0 }.to_json(), Some(t.to_owned()));
    let outcomes = rt
        .block_on(log.append(&key(), vec![e("a"), e("b"), e("a")]))
        .expect("appended");
    assert_eq!(
        outcomes,
        [
            AppendOutcome::Accepted { sequence: 1 },
            AppendOutcome::Accepted { sequence: 2 },
            AppendOutcome::Duplicate { sequence: 1 },
        ]
    );
}

#[test]
fn a_stale_commit_is_a_conflict() {
    let rt = runtime();
    let store = FakeStore::default();
    let commit = |expected_applied: u64, applied: u64| Commit {
        expected_applied,
        header: Header {
            applied_seq: applied,
            ..Header::default()
        },
        items: Vec::new(),
        products: Vec::new(),
        events: Vec::new(),
    };
    rt.block_on(store.commit(&key(), commit(0, 3)))
        .expect("first");
    assert!(matches!(
        rt.block_on(store.commit(&key(), commit(0, 5))),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.stored(&key()).header.applied_seq, 3);
}

#[test]
fn the_generators_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeSet;

    let mut runner = TestRunner::deterministic();
    let mut codes = BTreeSet::new();
    let mut accepted_kinds = BTreeSet::new();
    let mut accepted_sales = 0;
    for _ in 0..200 {
        let ops = ops().new_tree(&mut runner).expect("a value tree").current();
        let entries: Vec<Entry> = ops.iter().map(Op::entry).collect();
        for (entry, outcome) in entries.iter().zip(fold(&entries).1) {
            match outcome {
                Ok(()) => {
                    accepted_kinds.insert(entry.kind.type_name());
                    if matches!(entry.kind, EntryKind::ItemSale(_)) {
                        accepted_sales += 1;
                    }
                }
                Err(r) => {
                    codes.insert(r.code);
                }
            }
        }
    }
    let expected: BTreeSet<String> = [
        rejection_codes::UNKNOWN_PRODUCT,
        rejection_codes::UNKNOWN_ITEM,
        rejection_codes::ALREADY_REGISTERED,
        rejection_codes::ITEM_REMOVED,
        rejection_codes::PATCH_FAILED,
        rejection_codes::INVALID_DOCUMENT,
        rejection_codes::TOTAL_BELOW_SOLD_AND_RESERVED,
        rejection_codes::RETURN_EXCEEDS_SOLD,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(codes, expected);
    assert_eq!(accepted_kinds.len(), 13, "{accepted_kinds:?}");
    assert!(accepted_sales > 1000, "{accepted_sales}");

    // The processor scenarios hit faults and split commits.
    let rt = runtime();
    let (mut failures, mut split) = (0, 0);
    for _ in 0..40 {
        let s = scenario()
            .new_tree(&mut runner)
            .expect("a value tree")
            .current();
        let (_, _, f) = rt
            .block_on(run_scenario(&s.batched(), s.faults.clone()))
            .expect("processed");
        failures += f;
        split += usize::from(s.bulk >= 80);
    }
    assert!(failures > 20 && split > 5, "{failures} {split}");
}
