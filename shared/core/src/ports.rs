//! Ports: what the domain needs from storage and messaging. Every port has an embedded
//! adapter (SQLite) and an AWS adapter (DynamoDB, SQS), and one contract suite runs against
//! both. The shapes follow the stricter of the two: conditional writes, bounded atomic
//! commits (TransactWriteItems: 100 actions), items of at most 400 KB, at-least-once messages.

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use crate::ids::ItemId;
use crate::ids::{InstanceId, InstanceKey, ProjectKey, SubscriptionId, TenantId};
use crate::model::{
    AppendOutcome, Event, Instance, LogRecord, Message, NewEntry, Page, PageRequest,
    PriceCalculation, PriceHistoryEntry, Project,
};
use crate::money::Money;
use crate::pricing::PriceMatch;
use crate::state::{Header, InstanceState, ItemState, ProductState};
use crate::time::Timestamp;
use crate::webhooks::{
    AttemptUpdate, ClientReport, Delivery, DeliverySummary, Subscription, SubscriptionSecrets,
    SubscriptionStatus, WebhookSecret,
};

/// The most records one state commit may write (header and events included), so that an
/// AWS commit fits one TransactWriteItems call. A larger commit is refused with
/// `StoreError::Failed` and nothing is written; the processor never builds one.
pub const MAX_COMMIT_RECORDS: usize = 90;

/// The most bytes of records (header, items, products, as JSON) one state commit may
/// write besides its events (at most `process::rejected::MAX_BYTES_PER_COMMIT`), so that
/// an AWS commit stays within a transaction's 4 MB: 90 records of an item with 64 KiB of
/// metadata would be 6 MB. The processor commits before it gets there.
pub const MAX_COMMIT_RECORD_BYTES: usize = 2_500_000;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// A conditional write lost: the record exists, or another writer got there first.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    /// Worth retrying: throttling, timeouts, a busy database.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    #[error("storage failure: {0}")]
    Failed(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

pub trait ProjectStore: Send + Sync + 'static {
    /// Creates a project unless its tenant already has `max` projects: then `Ok(false)` and
    /// nothing is written (the tenant's quota). `Conflict` when the id is taken. Two
    /// creators racing for a tenant's last place cannot both win.
    fn create_project_within(
        &self,
        project: &Project,
        max: u64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Creates a project outside any quota (it still counts towards its tenant's);
    /// `Conflict` when the id is taken.
    fn create_project(&self, project: &Project) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.create_project_within(project, u64::MAX)
                .await
                .map(|_| ())
        }
    }
    fn get_project(
        &self,
        key: &ProjectKey,
    ) -> impl Future<Output = StoreResult<Option<Project>>> + Send;
    fn list_projects(
        &self,
        tenant: &TenantId,
        page: &PageRequest,
    ) -> impl Future<Output = StoreResult<Page<Project>>> + Send;
}

pub trait InstanceStore: Send + Sync + 'static {
    /// Creates the instance and its initial state header unless its project already holds
    /// `max` instances: then `Ok(false)` and nothing is written (the project's quota).
    /// `Conflict` when the id is taken. Two creators racing for a project's last place
    /// cannot both win.
    fn create_instance_within(
        &self,
        instance: &Instance,
        header: &Header,
        max: u64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Creates the instance and its initial state header outside any quota (it still
    /// counts towards its project's); `Conflict` when the id is taken.
    fn create_instance(
        &self,
        instance: &Instance,
        header: &Header,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.create_instance_within(instance, header, u64::MAX)
                .await
                .map(|_| ())
        }
    }
    fn get_instance(
        &self,
        key: &InstanceKey,
    ) -> impl Future<Output = StoreResult<Option<Instance>>> + Send;
    fn list_instances(
        &self,
        project: &ProjectKey,
        page: &PageRequest,
    ) -> impl Future<Output = StoreResult<Page<Instance>>> + Send;
    /// Replaces an existing instance record if it was not written since it was read: its
    /// stored `updatedAt` is still `if_updated_at`. `NotFound` when there is none,
    /// `Conflict` when another write came first (read it again, and apply the change to
    /// what it wrote: two writers that each replaced the whole record would lose one's
    /// change).
    fn put_instance(
        &self,
        instance: &Instance,
        if_updated_at: Timestamp,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The append-only entry log of each instance.
pub trait EntryLog: Send + Sync + 'static {
    /// Appends in order, deduplicating per (instance, transactionId), also within `entries`.
    /// Sequences start at 1 and have no gaps. Outcomes are in input order.
    fn append(
        &self,
        key: &InstanceKey,
        entries: Vec<NewEntry>,
    ) -> impl Future<Output = StoreResult<Vec<AppendOutcome>>> + Send;
    /// Entries with sequence > `after`, ascending, at most `limit`.
    fn read(
        &self,
        key: &InstanceKey,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<LogRecord>>> + Send;
    /// The highest sequence appended so far (0 when empty).
    fn last_sequence(&self, key: &InstanceKey) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// One atomic step of the entry processor.
#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    /// The header's applied sequence this commit builds on (optimistic concurrency).
    pub expected_applied: u64,
    pub header: Header,
    pub items: Vec<ItemState>,
    pub products: Vec<ProductState>,
    /// Events to deliver; written in the same atomic step.
    pub events: Vec<Event>,
}

impl Commit {
    pub fn record_count(&self) -> usize {
        1 + self.items.len() + self.products.len() + self.events.len()
    }
}

/// The derived state of instances.
pub trait StateStore: Send + Sync + 'static {
    /// The whole state; the default state when the instance has none yet.
    fn load_state(
        &self,
        key: &InstanceKey,
    ) -> impl Future<Output = StoreResult<InstanceState>> + Send;
    /// The applied sequence alone (a cheap freshness check for cached states).
    fn applied_sequence(&self, key: &InstanceKey) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Writes the commit atomically if the stored applied sequence is still
    /// `expected_applied`; `Conflict` otherwise (and nothing is written). An instance
    /// without a stored header counts as applied sequence 0. Events whose id is already
    /// stored for the instance are skipped (a replay yields the same ids).
    fn commit(
        &self,
        key: &InstanceKey,
        commit: Commit,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The events of each instance, in creation order: written with the state change that
/// caused them (a commit, a calculation) or on their own, and handed to the subscriptions
/// by the dispatcher, which marks how far it got (an outbox).
pub trait EventStore: Send + Sync + 'static {
    /// Events of an instance in creation order, after the event id `after` (ids are unique
    /// per instance); an unknown `after` id is `NotFound`.
    fn list_events(
        &self,
        key: &InstanceKey,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<Event>>> + Send;
    /// Appends events on their own (e.g. `instance.deactivated`); ids already stored for
    /// the instance are skipped. At most `MAX_COMMIT_RECORDS` events per call.
    fn append_events(
        &self,
        key: &InstanceKey,
        events: &[Event],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// The first `limit` events not dispatched yet, in creation order.
    fn undispatched_events(
        &self,
        key: &InstanceKey,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<Event>>> + Send;
    /// Marks every event up to and including `through` as dispatched. The mark only moves
    /// forward: marking an event at or before it is a no-op. An unknown id is `NotFound`.
    fn mark_dispatched(
        &self,
        key: &InstanceKey,
        through: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Instances with undispatched events (at most `limit`): the repair sweep wakes them.
    fn instances_with_undispatched_events(
        &self,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<InstanceKey>>> + Send;
}

/// Webhook subscriptions, at project level (`instance_id` none) or instance level.
pub trait SubscriptionStore: Send + Sync + 'static {
    /// Stores `subscription` unless its scope (the project's project-level subscriptions,
    /// or one instance's) already holds `max`: then `Ok(false)` and nothing is written.
    /// Two creators racing for the last place cannot both win.
    fn create_subscription(
        &self,
        subscription: &Subscription,
        max: usize,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    fn get_subscription(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
    ) -> impl Future<Output = StoreResult<Option<Subscription>>> + Send;
    /// One scope's subscriptions (project level when `instance` is none), oldest first.
    fn list_subscriptions(
        &self,
        project: &ProjectKey,
        instance: Option<&InstanceId>,
    ) -> impl Future<Output = StoreResult<Vec<Subscription>>> + Send;
    /// Deletes a subscription of either level; `false` when there was none.
    fn delete_subscription(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Sets the status (a 410 disables), with when and why; `NotFound` when there is none.
    fn set_subscription_status(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
        status: SubscriptionStatus,
        at: Timestamp,
        reason: Option<&str>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Rotates the subscription's signing secrets to `secret` at `at`
    /// ([`SubscriptionSecrets::rotated`] of the stored ones) and returns what is stored now;
    /// `NotFound` when there is no such subscription. Rotations and status changes of one
    /// subscription do not undo each other: racing rotations are applied one after the
    /// other (the later one keeps the earlier one's secret as `previous`).
    fn rotate_subscription_secret(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
        secret: &WebhookSecret,
        at: Timestamp,
    ) -> impl Future<Output = StoreResult<SubscriptionSecrets>> + Send;
}

/// Deliveries: one record per webhook (an event for one subscription), addressed by its
/// globally unique webhook id.
pub trait DeliveryStore: Send + Sync + 'static {
    /// Stores the deliveries whose webhook id is not stored yet; returns the ids it stored
    /// (a repeated dispatch creates nothing twice).
    fn create_deliveries(
        &self,
        deliveries: &[Delivery],
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    fn get_delivery(
        &self,
        webhook_id: &str,
    ) -> impl Future<Output = StoreResult<Option<Delivery>>> + Send;
    /// Records an attempt if the stored delivery is not final and has made
    /// `update.attempt - 1` attempts; `Ok(false)` (nothing written) otherwise, and
    /// `NotFound` when there is no such delivery. Client reports are kept.
    fn record_attempt(
        &self,
        webhook_id: &str,
        update: &AttemptUpdate,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Adds a receiver's error report (the first `MAX_CLIENT_REPORTS` are kept);
    /// `NotFound` when there is no such delivery.
    fn add_client_report(
        &self,
        webhook_id: &str,
        report: &ClientReport,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// A subscription's deliveries as the delivery log shows them (each one's summary:
    /// without its event, which the listing does not read), newest first; the cursor is
    /// opaque, and one this store never handed out is `NotFound`.
    fn list_deliveries(
        &self,
        project: &ProjectKey,
        subscription: &SubscriptionId,
        page: &PageRequest,
    ) -> impl Future<Output = StoreResult<Page<DeliverySummary>>> + Send;
    /// Webhook ids of deliveries that are not final and were due before `before`, oldest
    /// due first (at most `limit`): the repair sweep re-enqueues them.
    fn overdue_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    /// Moves a delivery's next attempt from `due` to `until` if the stored delivery is not
    /// final and its `next_attempt_at` is still exactly `due`; `Ok(false)` (nothing
    /// written) otherwise, and `NotFound` when there is no such delivery. Attempts, status
    /// and client reports are unchanged. The repair sweep postpones a delivery it
    /// re-enqueues, so that concurrent sweeps enqueue it once and it is not overdue again
    /// before `until` plus the grace.
    fn postpone(
        &self,
        webhook_id: &str,
        due: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
}

/// A signed webhook POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// Sends webhooks: one POST, 15 s timeout, no redirects, and (per the callback policy)
/// only to addresses checked at connect time.
pub trait WebhookTransport: Send + Sync + 'static {
    fn post(
        &self,
        request: WebhookRequest,
    ) -> impl Future<Output = crate::webhooks::delivery::Response> + Send;

    /// A place for an attempt of `tenant` to `destination` (a callback URL's origin), held
    /// until the attempt is over; `None` when the destination, or the tenant, already has
    /// as many attempts in flight as it may (`crate::webhooks::places`): the attempt is
    /// then not made, and the delivery is asked again later. Default: no limit.
    fn take_place(&self, destination: &str, tenant: &str) -> Option<crate::webhooks::Place> {
        let _ = (destination, tenant);
        Some(crate::webhooks::Place::unlimited())
    }
}

/// A received message; `receipt` acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub receipt: String,
    pub message: Message,
    /// 1 on first delivery.
    pub receive_count: u32,
}

/// Sending work: what producers (the API, the processor, the scheduler) need. Every
/// [`WorkQueue`] is one; on AWS a router sends each kind of message to its own queue.
pub trait Enqueue: Send + Sync + 'static {
    fn send(&self, message: &Message) -> impl Future<Output = StoreResult<()>> + Send;
    /// Sends every one of `messages`, as [`Enqueue::send`] would one by one (an adapter
    /// may send them in batches, and in any order). On an error some of them may have been
    /// sent: each message is work that is safe to do twice.
    fn send_all(&self, messages: &[Message]) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            for message in messages {
                self.send(message).await?;
            }
            Ok(())
        }
    }
}

impl<Q: WorkQueue> Enqueue for Q {
    fn send(&self, message: &Message) -> impl Future<Output = StoreResult<()>> + Send {
        WorkQueue::send(self, message)
    }
}

/// Work queues with SQS semantics: at-least-once, FIFO per group, visibility timeouts.
pub trait WorkQueue: Send + Sync + 'static {
    fn send(&self, message: &Message) -> impl Future<Output = StoreResult<()>> + Send;
    /// Up to `max` visible messages, hidden for `visibility`; at most one in flight per group.
    /// A message sent while another of the same dedupe key is in flight is delivered too
    /// (it may carry work the in-flight one missed); only not-yet-received ones merge.
    fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> impl Future<Output = StoreResult<Vec<Received>>> + Send;
    /// Deletes a handled message.
    fn ack(&self, receipt: &str) -> impl Future<Output = StoreResult<()>> + Send;
    /// Makes a message visible again after `delay` (a failed attempt). Like SQS
    /// ChangeMessageVisibility, its group stays locked during the delay.
    fn retry_later(
        &self,
        receipt: &str,
        delay: Duration,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// Finds instances whose log holds entries not applied yet: the repair sweep re-enqueues
/// them, so a wake-up lost between append and send delays processing but loses nothing.
pub trait Backlog: Send + Sync + 'static {
    fn instances_behind(
        &self,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<InstanceKey>>> + Send;
}

/// Calculated prices: the latest calculation of each instance and each item's history.
/// Storage follows change: the latest calculation is kept as every item's price without
/// explanations, and an explanation is stored once, in the item's history, by the
/// calculation that changed the price (see `model::is_history_entry`).
pub trait PriceStore: Send + Sync + 'static {
    /// Stores `calculation` as the instance's latest, with a history entry for every price
    /// whose status is `calculated` and that changed (`is_history_entry`: a price calculated
    /// again at the same value, or kept, adds none), and `events` (its `prices.updated`
    /// parts, made as they are written), if `calculation.sequence` is the stored latest's
    /// sequence + 1 (1 when none). Returns
    /// `Ok(false)` and writes nothing new when a calculation with this id is already stored
    /// (a replayed message); `Conflict` when another calculation took the sequence.
    /// Stores without multi-item atomicity write parts first and the latest pointer last.
    fn save_calculation_with(
        &self,
        key: &InstanceKey,
        calculation: &PriceCalculation,
        events: SaveEvents<'_>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// [`PriceStore::save_calculation_with`] a list of events.
    fn save_calculation(
        &self,
        key: &InstanceKey,
        calculation: &PriceCalculation,
        events: &[Event],
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        self.save_calculation_with(key, calculation, SaveEvents::Listed(events))
    }
    /// Whether a calculation with this id is stored for the instance. A store whose save
    /// takes several writes finishes one that was cut off first (on DynamoDB: its events,
    /// history and the retirement of the calculation it replaced), since a redelivered
    /// message asks this before anything else.
    fn has_calculation(
        &self,
        key: &InstanceKey,
        calculation_id: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// The latest calculation, `None` before the first: every price, previous price,
    /// status and carried exposure, each with an empty explanation (the explanations are in
    /// the history: `PriceCalculation::without_explanations` of what was saved).
    fn latest_prices(
        &self,
        key: &InstanceKey,
    ) -> impl Future<Output = StoreResult<Option<PriceCalculation>>> + Send;
    /// A page of the latest calculation's prices, `None` before the first: at most `limit`
    /// item prices from the `offset`-th (in item id order) and how many there are in all.
    /// This default reads the whole calculation; a store that can read part of it without
    /// decoding every price (and its carried exposure) does so: a page of a 100,000-item
    /// instance's prices must not cost the whole list (docs/performance.md).
    fn latest_prices_page(
        &self,
        key: &InstanceKey,
        offset: usize,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Option<LatestPricesPage>>> + Send {
        async move {
            Ok(self
                .latest_prices(key)
                .await?
                .map(|c| LatestPricesPage::of(c, offset, limit)))
        }
    }
    /// An item's history entries (its changed calculated prices, with explanations) by
    /// ascending sequence; the cursor is opaque.
    fn price_history(
        &self,
        key: &InstanceKey,
        item: &ItemId,
        page: &PageRequest,
    ) -> impl Future<Output = StoreResult<Page<PriceHistoryEntry>>> + Send;
}

/// A page of an instance's latest prices ([`PriceStore::latest_prices_page`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LatestPricesPage {
    pub calculation_id: String,
    pub calculated_at: Timestamp,
    pub sequence: u64,
    /// Item id and price, in item id order.
    pub prices: Vec<(ItemId, Money)>,
    /// How many prices the calculation has in all.
    pub total: usize,
}

impl LatestPricesPage {
    /// The page of a whole calculation.
    pub fn of(calculation: PriceCalculation, offset: usize, limit: usize) -> Self {
        let total = calculation.prices.len();
        LatestPricesPage {
            prices: calculation
                .prices
                .into_iter()
                .skip(offset)
                .take(limit)
                .map(|p| (p.item_id, p.price))
                .collect(),
            calculation_id: calculation.calculation_id,
            calculated_at: calculation.calculated_at,
            sequence: calculation.sequence,
            total,
        }
    }
}

/// The events a calculation's save stores with it: a list, or the calculation's own
/// `prices.updated` parts, made one at a time as the store writes them (made all at once, a
/// 100,000-item calculation's 100 parts held ~63 MB as `Value` trees; docs/performance.md).
#[derive(Debug, Clone, Copy)]
pub enum SaveEvents<'a> {
    Listed(&'a [Event]),
    PricesUpdated {
        key: &'a InstanceKey,
        calculation: &'a PriceCalculation,
    },
}

impl<'a> SaveEvents<'a> {
    pub fn len(&self) -> usize {
        match self {
            SaveEvents::Listed(events) => events.len(),
            SaveEvents::PricesUpdated { calculation, .. } => {
                crate::recalc::price_parts(calculation)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events in order; a part is made when it is reached.
    pub fn iter(self) -> impl Iterator<Item = Cow<'a, Event>> + 'a {
        (0..self.len()).map(move |i| match self {
            SaveEvents::Listed(events) => Cow::Borrowed(&events[i]),
            SaveEvents::PricesUpdated { key, calculation } => {
                Cow::Owned(crate::recalc::prices_updated_part(key, calculation, i))
            }
        })
    }
}

/// The price match rules of an instance, kept as one versioned set so a change is
/// validated (no cycles) against the whole set and written conditionally.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatchSet {
    pub rules: Vec<PriceMatch>,
    /// 0 before the first write; each write increments it.
    pub version: u64,
}

pub trait PriceMatchStore: Send + Sync + 'static {
    fn get_matches(&self, key: &InstanceKey) -> impl Future<Output = StoreResult<MatchSet>> + Send;
    /// Replaces the set if the stored version is still `expected_version`; `Conflict`
    /// otherwise (and nothing is written).
    fn put_matches(
        &self,
        key: &InstanceKey,
        rules: &[PriceMatch],
        expected_version: u64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// Other instances of a project the revenue model learns booking curves from, at most.
pub const PAST_INSTANCES: usize = 10;

/// The product records of a project's other instances: the revenue model learns each
/// product's booking curve from them (a festival's day 2, next year's edition).
pub trait ProjectSales: Send + Sync + 'static {
    /// The product records of at most `limit` other instances of `key`'s project (the
    /// newest instance ids first), `key`'s own excluded.
    fn past_products(
        &self,
        key: &InstanceKey,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<ProductState>>> + Send;
}

/// A record a scan could not decode. Scans skip it and report it; one bad record never
/// stops a run that serves every tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// The record's key, e.g. `{projectId}/{instanceId}`.
    pub key: String,
    pub error: String,
}

/// An instance as the scheduler's index holds it: what deciding needs, without reading
/// the instance record. Adapters write the entry with the instance (creation and every
/// `put_instance`: the entry exists exactly while [`crate::lifecycle::indexed`] holds: the
/// active flag is set, or a deactivation date awaits its `instance.deactivated` event) and
/// keep it ordered by `due` within its tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleEntry {
    pub key: InstanceKey,
    /// The tenant owning the instance's project (the index is partitioned by it).
    pub tenant: TenantId,
    /// When the scheduler next looks at the instance: the start of its next schedule slot
    /// or its deactivation date, whichever comes first. Writing the instance sets it to
    /// [`crate::lifecycle::index_due`] (the instance's `updated_at`, earlier when the
    /// deactivation date is; an inactive instance's deactivation date); a commit that
    /// changes the pricing schedule moves it to the commit time, so a new schedule takes
    /// effect at the next run.
    pub due: Timestamp,
    /// The instance's flag. An inactive instance is indexed only until its deactivation
    /// date, for its `instance.deactivated` event; it gets no scheduled calculations.
    pub active: bool,
    pub time_zone: Option<String>,
    pub deactivation_date: Option<Timestamp>,
    /// The pricing schedule of the state header (`None` = the default, every 60 minutes),
    /// read with the entry.
    pub schedule: Option<crate::entry::Schedule>,
}

/// The due entries of one tenant: what decoded, and what was skipped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DuePage {
    pub items: Vec<ScheduleEntry>,
    pub skipped: Vec<SkippedDue>,
}

/// A due entry whose record (or state header) does not decode: its key and due time
/// come from the index itself, so the scheduler can report it and set it aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedDue {
    pub record: SkippedRecord,
    pub key: InstanceKey,
    pub due: Timestamp,
}

/// The scheduler's index of active instances, partitioned by tenant and ordered by due
/// time, so that a run reads only what is due and serves tenants in turn.
pub trait ActiveInstances: Send + Sync + 'static {
    /// Tenants whose partition may hold entries, ascending, after `after`, at most
    /// `limit`: every tenant with an active instance is listed (a store may also list a
    /// tenant whose instances are all inactive now).
    fn scheduled_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<TenantId>>> + Send;
    /// The tenant's entries due at or before `now`, earliest due first (then by key), at
    /// most `limit`, each with its header's schedule. An entry or header that does not
    /// decode is skipped and reported (it still counts towards `limit`).
    fn due_instances(
        &self,
        tenant: &TenantId,
        now: Timestamp,
        limit: usize,
    ) -> impl Future<Output = StoreResult<DuePage>> + Send;
    /// Moves an entry's due time from `due` to `until` if it is still exactly `due`;
    /// `Ok(false)` (nothing written) otherwise, also when there is no entry. Of concurrent
    /// schedulers, the one that moves it handles the instance.
    fn reschedule(
        &self,
        key: &InstanceKey,
        due: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
}

/// Where each step of the scheduler stopped, kept between runs (a Lambda keeps nothing).
pub trait SchedulerCursors: Send + Sync + 'static {
    /// The cursor last saved for `step`, `None` before the first save.
    fn load_cursor(&self, step: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    /// Replaces the cursor of `step` (the last writer wins).
    fn save_cursor(&self, step: &str, cursor: &str)
    -> impl Future<Output = StoreResult<()>> + Send;
}

/// The answer of a [`RateLimit`] to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// Over the tenant's limit: nothing is admitted before `retry_after` has passed.
    Limited {
        retry_after: Duration,
    },
}

/// A per-tenant request rate limit, shared by every process that serves the tenant
/// (standalone: in memory; AWS: a counter in DynamoDB, one conditional write per
/// request). A tenant over its limit never affects another tenant's admissions.
pub trait RateLimit: Send + Sync + 'static {
    /// Counts one request of `tenant` arriving at `now`, if it is within the limit.
    fn admit(
        &self,
        tenant: &TenantId,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Admission>> + Send;
}
