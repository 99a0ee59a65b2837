//! The entry processor: applies the unapplied tail of an instance's log in order.
//!
//! Idempotent by construction: it always starts from the stored applied sequence, and each
//! commit is conditional on it, so a crash half way, a duplicated wake-up or two processors
//! racing all end in the same state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use crate::document::encoded_len;
use crate::entry::{ParseOptions, parse_entry};
use crate::ids::{InstanceKey, ProductId};
use crate::jws::decode_jws_payload;
use crate::model::LogRecord;
use crate::model::Message;
use crate::ports::{
    Backlog, Commit, Enqueue, EntryLog, MAX_COMMIT_RECORD_BYTES, MAX_COMMIT_RECORDS, StateStore,
    StoreError, StoreResult,
};
use crate::pricing::sold_percent_crossed;
use crate::recalc::PriceHint;
use crate::state::{Dirty, InstanceState, Rejection, rejection_codes};
use crate::time::Timestamp;
use crate::validate::Errors;

pub mod rejected;
#[cfg(test)]
mod tests;

pub use rejected::{RejectedEvents, rejected_events};

/// Log entries read per round trip.
const READ_BATCH: usize = 500;
/// Conflicts tolerated before giving up (another processor keeps winning).
const MAX_CONFLICTS: usize = 5;
/// States kept warm between runs.
const CACHE_CAPACITY: usize = 256;

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessReport {
    pub applied: u64,
    pub rejected: u64,
    pub commits: u64,
    pub applied_seq: u64,
    /// A product's sold share crossed a multiple of its `recalculation.soldPercentStep` in
    /// this run.
    pub sales_threshold_crossed: bool,
    /// The sales-triggered calculation the caller asks for (the applied sequence that
    /// names it): this run's crossing, or an earlier run's not known to be asked for
    /// (its request may have been lost after the commit). Once asked, the caller says so
    /// with [`Processor::sales_calculation_asked`].
    pub sales_calculation: Option<u64>,
    /// The rejected entries per rejection code (`entries.rejected`), for the metrics.
    pub rejected_codes: BTreeMap<String, u64>,
    /// When the first entry this run applied (or rejected) was received: the run's longest
    /// wait from receipt to application.
    pub first_received_at: Option<Timestamp>,
}

/// One entry that failed semantically, as reported in `entries.rejected`.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedEntry {
    pub sequence: u64,
    pub transaction_id: Option<String>,
    pub entry_type: String,
    pub rejection: Rejection,
}

/// Applies log tails, keeping recently used states in memory.
///
/// The warm states can also serve reads ([`Processor::shared_state`]): where one process
/// both processes and answers reads (the standalone), a large instance's state is then
/// held once, not once more by every read of it.
#[derive(Default)]
pub struct Processor {
    cache: Mutex<HashMap<InstanceKey, Arc<InstanceState>>>,
    /// The latest prices of recently calculated instances (a hint; see
    /// `recalc::recalculate_from`).
    prices: Mutex<HashMap<InstanceKey, PriceHint>>,
    /// The last sales-triggered calculation asked for, per instance: its due mark is
    /// cleared by the next run that commits.
    asked: Mutex<HashMap<InstanceKey, u64>>,
}

impl Processor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies everything after the stored applied sequence. `now` stamps events.
    pub async fn process<L: EntryLog, S: StateStore>(
        &self,
        log: &L,
        store: &S,
        key: &InstanceKey,
        now: Timestamp,
    ) -> StoreResult<ProcessReport> {
        let mut conflicts = 0;
        loop {
            let mut state = self.checkout(store, key).await?;
            let asked = self
                .asked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .copied();
            if state.header.sales_calculation_due.is_some()
                && state.header.sales_calculation_due == asked
            {
                // Asked for: the next commit stores it cleared.
                state.header.sales_calculation_due = None;
            }
            match run(log, store, key, state, now).await {
                Ok((report, state)) => {
                    self.checkin(key, state);
                    return Ok(report);
                }
                Err(StoreError::Conflict(_)) if conflicts < MAX_CONFLICTS => {
                    // Someone else advanced the state: start again from what is stored.
                    conflicts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn checkout<S: StateStore>(
        &self,
        store: &S,
        key: &InstanceKey,
    ) -> StoreResult<InstanceState> {
        let cached = self.lock().remove(key);
        if let Some(state) = cached
            && store.applied_sequence(key).await? == state.header.applied_seq
        {
            // A read that still holds it keeps its own copy.
            return Ok(Arc::unwrap_or_clone(state));
        }
        store.load_state(key).await
    }

    /// The instance's state as stored, for reading: the warm state when it is current,
    /// else loaded from the store and kept warm (for the next read and the next run),
    /// unless a newer one was kept meanwhile. While a run has the state out (processing,
    /// calculating), a read loads its own copy.
    pub async fn shared_state<S: StateStore>(
        &self,
        store: &S,
        key: &InstanceKey,
    ) -> StoreResult<Arc<InstanceState>> {
        let cached = self.lock().get(key).cloned();
        if let Some(state) = cached
            && store.applied_sequence(key).await? == state.header.applied_seq
        {
            return Ok(state);
        }
        let state = Arc::new(store.load_state(key).await?);
        let mut cache = self.lock();
        let newer_kept = cache
            .get(key)
            .is_some_and(|kept| kept.header.applied_seq >= state.header.applied_seq);
        if !newer_kept {
            Self::keep(&mut cache, key, state.clone());
        }
        Ok(state)
    }

    /// The latest prices this processor stored for the instance, if it remembers them,
    /// taken out of the cache (not copied: a 100,000-item instance's are ~19 MB): the
    /// calculation that takes them remembers its own with [`Processor::remember_prices`].
    pub fn take_price_hint(&self, key: &InstanceKey) -> Option<PriceHint> {
        self.prices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
    }

    /// Records that the sales-triggered calculation `report.sales_calculation` named was
    /// asked for (sent to the queue).
    pub fn sales_calculation_asked(&self, key: &InstanceKey, applied_seq: u64) {
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if asked.len() >= CACHE_CAPACITY
            && !asked.contains_key(key)
            && let Some(evict) = asked.keys().next().cloned()
        {
            asked.remove(&evict);
        }
        asked.insert(key.clone(), applied_seq);
    }

    /// Remembers the prices of a stored calculation.
    pub fn remember_prices(&self, key: &InstanceKey, hint: PriceHint) {
        let mut hints = self.prices.lock().unwrap_or_else(|e| e.into_inner());
        if hints.len() >= CACHE_CAPACITY
            && let Some(evict) = hints.keys().next().cloned()
        {
            hints.remove(&evict);
        }
        hints.insert(key.clone(), hint);
    }

    fn checkin(&self, key: &InstanceKey, state: InstanceState) {
        Self::keep(&mut self.lock(), key, Arc::new(state));
    }

    fn keep(
        cache: &mut HashMap<InstanceKey, Arc<InstanceState>>,
        key: &InstanceKey,
        state: Arc<InstanceState>,
    ) {
        if cache.len() >= CACHE_CAPACITY
            && !cache.contains_key(key)
            && let Some(evict) = cache.keys().next().cloned()
        {
            cache.remove(&evict);
        }
        cache.insert(key.clone(), state);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceKey, Arc<InstanceState>>> {
        // A poisoned cache only loses warm states; recover it.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn run<L: EntryLog, S: StateStore>(
    log: &L,
    store: &S,
    key: &InstanceKey,
    mut state: InstanceState,
    now: Timestamp,
) -> StoreResult<(ProcessReport, InstanceState)> {
    let mut report = ProcessReport::default();
    let mut dirty = Dirty::default();
    let mut rejected = RejectedEvents::new(key, now);
    let mut committed = state.header.applied_seq;
    let sold_before = sales_watch(&state);
    let mut weight = Weight::default();
    loop {
        let records = log.read(key, state.header.applied_seq, READ_BATCH).await?;
        if records.is_empty() {
            break;
        }
        for record in &records {
            report.first_received_at.get_or_insert(record.received_at);
            match apply_record(&mut state, record, &mut dirty) {
                Ok(()) => report.applied += 1,
                Err(r) => {
                    report.rejected += 1;
                    *report
                        .rejected_codes
                        .entry(r.rejection.code.clone())
                        .or_default() += 1;
                    rejected.push(&r);
                }
            }
            weight.add(&state, &dirty, record.jwt.len());
            // Keep each commit within one atomic write of the AWS store: records (the
            // next entry may add one more), their bytes (the next entry may add its own)
            // and the bytes of the rejection events.
            if dirty.record_count() + rejected.event_count() + 1 >= MAX_COMMIT_RECORDS
                || weight.at_most(&dirty) + MAX_ENTRY_BYTES >= MAX_COMMIT_RECORD_BYTES
                || rejected.bytes() >= rejected::MAX_BYTES_PER_COMMIT
            {
                mark_sales_crossing(&mut state, &sold_before, &dirty, &mut report);
                commit(store, key, &state, &mut dirty, &mut rejected, committed).await?;
                committed = state.header.applied_seq;
                report.commits += 1;
                weight = Weight::default();
            }
        }
    }
    if dirty.record_count() > 0 || !rejected.is_empty() {
        mark_sales_crossing(&mut state, &sold_before, &dirty, &mut report);
        commit(store, key, &state, &mut dirty, &mut rejected, committed).await?;
        report.commits += 1;
    }
    report.applied_seq = state.header.applied_seq;
    report.sales_calculation = state.header.sales_calculation_due;
    Ok((report, state))
}

/// Before a commit: where the run's sales so far crossed a trigger's step, the header
/// marks the calculation due at the applied sequence, so that the mark is committed with
/// the sales and a request lost after the commit is asked for again by a later run.
fn mark_sales_crossing(
    state: &mut InstanceState,
    sold_before: &BTreeMap<ProductId, (u64, u64, f64)>,
    batch: &Dirty,
    report: &mut ProcessReport,
) {
    if report.applied > 0 && sales_crossed(sold_before, batch, &sales_watch(state)) {
        report.sales_threshold_crossed = true;
        state.header.sales_calculation_due = Some(state.header.applied_seq);
    }
}

/// The most bytes one more entry can add to a commit's records: the entry itself (a JWS
/// of at most 64 KiB of entry, ~88 KB: a patch cannot grow a document by more than the
/// entry that holds it) and the records it may change for the first time in the commit
/// (an item and its product, each with up to 64 KiB of metadata and of properties).
const MAX_ENTRY_BYTES: usize = 512 * 1024;

/// What the records of the next commit weigh as JSON, at most: each changed record as it
/// was when it first changed since the last commit, plus the bytes of every entry applied
/// since (what an entry adds to a record is at most its own size). Each record is measured
/// once per commit, so a batch of one-entry sales costs one measure of its item.
#[derive(Default)]
struct Weight {
    bytes: usize,
    header: bool,
    items: BTreeSet<crate::ids::ItemId>,
    products: BTreeSet<ProductId>,
}

/// Records a commit may hold before they are weighed: each is at most what one DynamoDB
/// item holds ([`MAX_RECORD_BYTES`]; a larger one no store could write), so a few cannot
/// outgrow the bound, and the batches of one entry that are most of the traffic are never
/// measured (measuring them cost 3 % of a one-entry request's CPU).
const UNWEIGHED_RECORDS: usize = 4;
const MAX_RECORD_BYTES: usize = 400 * 1024;

impl Weight {
    /// At most what the next commit's records weigh: as measured, or, while they are a few
    /// and not measured, the most that many can.
    fn at_most(&self, dirty: &Dirty) -> usize {
        let records = dirty.record_count();
        if records <= UNWEIGHED_RECORDS {
            self.bytes + records * MAX_RECORD_BYTES
        } else {
            self.bytes
        }
    }

    fn add(&mut self, state: &InstanceState, dirty: &Dirty, entry_bytes: usize) {
        self.bytes = self.bytes.saturating_add(entry_bytes);
        if dirty.record_count() <= UNWEIGHED_RECORDS {
            return;
        }
        // Past a few records, every changed record is measured once (those changed
        // before are caught up now).
        if !self.header {
            // Every commit writes the header.
            self.header = true;
            self.bytes = self.bytes.saturating_add(encoded_len(&state.header));
        }
        if dirty.items.len() > self.items.len() {
            for id in &dirty.items {
                if self.items.insert(id.clone()) {
                    self.bytes = self
                        .bytes
                        .saturating_add(state.items.get(id).map_or(0, encoded_len));
                }
            }
        }
        if dirty.products.len() > self.products.len() {
            for id in &dirty.products {
                if self.products.insert(id.clone()) {
                    self.bytes = self
                        .bytes
                        .saturating_add(state.products.get(id).map_or(0, encoded_len));
                }
            }
        }
    }
}

/// Sold units, capacity and step of every product with a sales-based trigger.
fn sales_watch(state: &InstanceState) -> BTreeMap<ProductId, (u64, u64, f64)> {
    if state
        .products
        .values()
        .all(|p| p.properties.recalculation.is_none())
    {
        return BTreeMap::new();
    }
    let totals = state.product_totals();
    state
        .products
        .values()
        .filter_map(|p| {
            let step = p.properties.recalculation?.sold_percent_step;
            let t = totals.get(&p.product_id).copied().unwrap_or_default();
            let capacity = InstanceState::effective_capacity(p, &t)?;
            Some((p.product_id.clone(), (t.sold, capacity, step)))
        })
        .collect()
}

/// Whether a product with a sales trigger after the batch crossed a step in it: from what
/// it had sold when the batch turned its trigger on (the units sold since subtracted),
/// else from what it sold before the batch (`before`), else from nothing when the batch
/// registered it. Turning a trigger on does not fire it; a sale after it may.
fn sales_crossed(
    before: &BTreeMap<ProductId, (u64, u64, f64)>,
    batch: &Dirty,
    after: &BTreeMap<ProductId, (u64, u64, f64)>,
) -> bool {
    after.iter().any(|(product, &(sold, capacity, step))| {
        let was = match (batch.triggers_on.get(product), before.get(product)) {
            (Some(&Some(since)), _) => {
                (i128::from(sold) - since).clamp(0, i128::from(u64::MAX)) as u64
            }
            (Some(None), _) => return false,
            (None, Some(b)) => b.0,
            (None, None) if batch.registered_products.contains(product) => 0,
            (None, None) => return false,
        };
        sold_percent_crossed(step, was, sold, capacity)
    })
}

/// Decodes, validates and applies one stored entry.
pub fn apply_record(
    state: &mut InstanceState,
    record: &LogRecord,
    dirty: &mut Dirty,
) -> Result<(), Box<RejectedEntry>> {
    let fail = |entry_type: String, rejection: Rejection| {
        Box::new(RejectedEntry {
            sequence: record.sequence,
            transaction_id: record.transaction_id.as_ref().map(|t| t.to_string()),
            entry_type,
            rejection,
        })
    };
    let parsed = decode_jws_payload(&record.jwt)
        .map_err(|e| e.to_string())
        .and_then(|payload| {
            let mut errors = Errors::default();
            let entry_type = payload
                .get("type")
                .and_then(|t| t.as_str())
                .unwrap_or("unknown")
                .to_owned();
            parse_entry(&payload, "", ParseOptions::default(), &mut errors)
                .ok_or_else(|| {
                    errors
                        .list
                        .first()
                        .map(|e| format!("{} {}", e.pointer, e.message))
                        .unwrap_or_default()
                })
                .map(|entry| (entry, entry_type))
        });
    let (entry, entry_type) = match parsed {
        Ok(ok) => ok,
        Err(message) => {
            // Validated at submission, so only a rule change can bring us here.
            state.header.applied_seq = record.sequence;
            dirty.header = true;
            return Err(fail(
                "unknown".into(),
                Rejection {
                    code: rejection_codes::INVALID_ENTRY.into(),
                    message,
                    pointer: String::new(),
                },
            ));
        }
    };
    state
        .apply_logged(&entry, record.sequence, dirty)
        .map_err(|r| fail(entry_type, r))
}

async fn commit<S: StateStore>(
    store: &S,
    key: &InstanceKey,
    state: &InstanceState,
    dirty: &mut Dirty,
    rejected: &mut RejectedEvents,
    expected_applied: u64,
) -> StoreResult<()> {
    let events = rejected.take();
    let commit = Commit {
        expected_applied,
        header: state.header.clone(),
        items: dirty
            .items
            .iter()
            .filter_map(|id| state.items.get(id).cloned())
            .collect(),
        products: dirty
            .products
            .iter()
            .filter_map(|id| state.products.get(id).cloned())
            .collect(),
        events,
    };
    store.commit(key, commit).await?;
    dirty.clear();
    Ok(())
}

/// What a repair sweep did; the caller logs the failures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub enqueued: usize,
    pub failures: Vec<(InstanceKey, StoreError)>,
}

/// The repair sweep: wakes the processor for every instance whose log is ahead of its
/// state (at most `limit`), so a wake-up lost between append and send delays processing
/// but loses nothing.
pub async fn sweep<B: Backlog, Q: Enqueue>(
    backlog: &B,
    queue: &Q,
    limit: usize,
) -> StoreResult<SweepReport> {
    let mut report = SweepReport::default();
    for key in backlog.instances_behind(limit).await? {
        match queue
            .send(&Message::ProcessInstance { key: key.clone() })
            .await
        {
            Ok(()) => report.enqueued += 1,
            Err(e) => report.failures.push((key, e)),
        }
    }
    Ok(report)
}
