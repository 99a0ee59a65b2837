//! The scheduler: one run every minute (AWS: EventBridge; standalone: every tick), the
//! same steps on both deployments, each bounded in work and in time so that no step and
//! no tenant starves the others.
//!
//! Steps, in order, each with its own deadline (a share of the run's time, see
//! [`RunTime`]) and its own item budget ([`Budgets`]):
//! 1. repair sweep: instances whose log is ahead of their state get a wake-up;
//! 2. webhook sweep: instances with undispatched events get a wake-up, overdue deliveries
//!    are re-enqueued;
//! 3. due instances: the scheduler's index ([`ActiveInstances`]) holds every active
//!    instance under its tenant, ordered by when it is next due (its next schedule slot or
//!    its deactivation date), and every inactive one whose deactivation date still awaits
//!    its `instance.deactivated` event (due at that date). Tenants are served round robin from a persisted cursor
//!    ([`SchedulerCursors`]), at most [`Budgets::per_tenant`] due instances each per
//!    pass; a due instance is deactivated, or gets its scheduled calculation and its due
//!    time moved to the next slot.
//!
//! Fairness (step 3): a run starts with the tenant after the one the previous run served
//! last, and gives each tenant at most `per_tenant` instances before the next tenant's
//! turn; only when a whole pass over the tenants is done and budget is left does a tenant
//! get a second helping. So with `T` tenants that have due instances, a due instance of
//! any tenant waits at most `ceil(T / k)` runs before its tenant's turn, where `k >= due /
//! per_tenant` is the number of tenants a run serves, however many instances the other
//! tenants have; within a tenant, instances are served earliest due first, so none is
//! skipped for ever. The sweeps (1, 2) are repair paths for lost messages: bounded per
//! run, not divided by tenant.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ids::TenantId;
use crate::lifecycle::deactivate;
use crate::model::Message;
use crate::ports::{
    ActiveInstances, Backlog, DeliveryStore, Enqueue, EventStore, InstanceStore, PriceStore,
    ScheduleEntry, SchedulerCursors, SkippedRecord, StoreError, StoreResult,
};
use crate::pricing::{Trigger, schedule_slots};
use crate::recalc::scheduled_calculation_id;
use crate::time::Timestamp;
use crate::webhooks::lane::sweep_until;

/// The cursor name of the due-instances step (the last tenant it served).
pub const DUE_CURSOR: &str = "due";

/// How long a due entry that cannot be decoded is set aside before it is looked at again
/// (so undecodable records do not fill their tenant's page every run).
pub const SKIPPED_DELAY: Duration = Duration::from_secs(3_600);

/// Error messages a report keeps (the count is always complete).
const MAX_ERRORS: usize = 20;

/// What one run may do at most, per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Instances the repair sweep re-enqueues.
    pub sweep: usize,
    /// Instances, and deliveries, the webhook sweep re-enqueues (each).
    pub webhooks: usize,
    /// Due instances handled, over all tenants.
    pub due: usize,
    /// Due instances of one tenant per pass over the tenants.
    pub per_tenant: usize,
    /// Tenants read per page of the round robin.
    pub tenant_page: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            sweep: 10_000,
            webhooks: 1_000,
            due: 5_000,
            per_tenant: 100,
            tenant_page: 100,
        }
    }
}

/// The time a run has, split between the steps: the repair sweep may use the first 15 %,
/// the webhook sweep up to 30 %, the due instances the rest. A step that starts late (the
/// one before it overran) still gets at least 10 % of the run, within its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTime {
    pub start: Instant,
    pub total: Duration,
}

impl RunTime {
    /// A run of `total` starting now.
    pub fn starting_now(total: Duration) -> Self {
        RunTime {
            start: Instant::now(),
            total,
        }
    }

    /// A run that must be done by `deadline` (e.g. the Lambda's), keeping `margin` for
    /// the last request in flight and the report; at most `cap`.
    pub fn until(deadline: Instant, margin: Duration, cap: Duration) -> Self {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(margin);
        Self::starting_now(left.min(cap))
    }

    fn end(&self) -> Instant {
        self.start + self.total
    }

    /// The deadline of a step whose share ends at `share_end` (percent of the run).
    fn step_deadline(&self, share_end: u32) -> Instant {
        let planned = self.start + self.total * share_end / 100;
        let floor = Instant::now() + self.total / 10;
        planned.max(floor).min(self.end())
    }
}

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunReport {
    /// Instances woken by the repair sweep (log ahead of state).
    pub swept: usize,
    /// Instances woken to dispatch their events.
    pub undispatched: usize,
    /// Deliveries re-enqueued because their message was lost.
    pub overdue: usize,
    /// Scheduled calculations enqueued.
    pub scheduled: usize,
    /// Instances deactivated.
    pub deactivated: usize,
    /// Due instances whose slot was calculated already (only their due time moved).
    pub already_calculated: usize,
    /// Tenants served by the due step (counting each pass).
    pub tenants: usize,
    /// Due entries that could not be decoded (set aside for a while).
    pub skipped: usize,
    /// Those entries, for the caller to log.
    #[serde(skip)]
    pub skipped_records: Vec<SkippedRecord>,
    /// Steps that stopped at their deadline or budget with work left for the next run.
    pub stopped: Vec<&'static str>,
    /// Failures (the run went on with the rest); the first [`MAX_ERRORS`] messages.
    pub errors: Vec<String>,
    pub error_count: usize,
}

impl RunReport {
    fn error(&mut self, e: String) {
        self.error_count += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(e);
        }
    }
}

/// What the scheduler needs of storage.
pub trait SchedulerStore:
    Backlog
    + ActiveInstances
    + SchedulerCursors
    + PriceStore
    + InstanceStore
    + EventStore
    + DeliveryStore
{
}

impl<S> SchedulerStore for S where
    S: Backlog
        + ActiveInstances
        + SchedulerCursors
        + PriceStore
        + InstanceStore
        + EventStore
        + DeliveryStore
{
}

/// One scheduler run: every step, each within its budget and deadline; a step that fails
/// does not stop the others (its failure is in the report).
pub async fn run<S, Q>(
    store: &S,
    queue: &Q,
    now: Timestamp,
    time: RunTime,
    budgets: &Budgets,
) -> RunReport
where
    S: SchedulerStore,
    Q: Enqueue,
{
    let mut report = RunReport::default();
    repair_sweep(
        store,
        queue,
        budgets.sweep,
        time.step_deadline(15),
        &mut report,
    )
    .await;
    match sweep_until(store, queue, now, budgets.webhooks, time.step_deadline(30)).await {
        Ok(hooks) => {
            report.undispatched = hooks.instances;
            report.overdue = hooks.deliveries;
            if hooks.stopped {
                report.stopped.push("webhook sweep");
            }
        }
        Err(e) => report.error(format!("webhook sweep: {e}")),
    }
    if let Err(e) = due_instances(
        store,
        queue,
        now,
        time.step_deadline(100),
        budgets,
        &mut report,
    )
    .await
    {
        report.error(format!("due instances: {e}"));
    }
    report
}

async fn repair_sweep<B: Backlog, Q: Enqueue>(
    backlog: &B,
    queue: &Q,
    limit: usize,
    deadline: Instant,
    report: &mut RunReport,
) {
    let keys = match backlog.instances_behind(limit).await {
        Ok(keys) => keys,
        Err(e) => return report.error(format!("repair sweep: {e}")),
    };
    for key in keys {
        if Instant::now() >= deadline {
            report.stopped.push("repair sweep");
            return;
        }
        match queue
            .send(&Message::ProcessInstance { key: key.clone() })
            .await
        {
            Ok(()) => report.swept += 1,
            Err(e) => report.error(format!("repair sweep: enqueueing {key}: {e}")),
        }
    }
}

/// The due step: passes over the tenants round robin from the saved cursor, while budget
/// and time are left and some tenant had more due than its share.
async fn due_instances<S, Q>(
    store: &S,
    queue: &Q,
    now: Timestamp,
    deadline: Instant,
    budgets: &Budgets,
    report: &mut RunReport,
) -> StoreResult<()>
where
    S: SchedulerStore,
    Q: Enqueue,
{
    let saved = store.load_cursor(DUE_CURSOR).await?;
    let mut last = saved.as_deref().and_then(TenantId::from_claim);
    let mut left = budgets.due;
    let result = loop {
        let mut tenants = RoundRobin::new(last.clone(), budgets.tenant_page.max(1));
        let mut more = false;
        let outcome: StoreResult<bool> = async {
            while let Some(tenant) = tenants.next(store).await? {
                if left == 0 || Instant::now() >= deadline {
                    return Ok(true);
                }
                let limit = budgets.per_tenant.min(left).max(1);
                let served =
                    serve_tenant(store, queue, &tenant, now, limit, deadline, report).await;
                left = left.saturating_sub(served.handled);
                if served.handled > 0 || served.complete {
                    last = Some(tenant);
                    report.tenants += 1;
                }
                if !served.complete {
                    return Ok(true);
                }
                more |= served.handled >= limit;
            }
            Ok(false)
        }
        .await;
        match outcome {
            Ok(true) => {
                report.stopped.push("due instances");
                break Ok(());
            }
            Ok(false) if more && left > 0 && Instant::now() < deadline => continue,
            Ok(false) if more => {
                // Budget or time ran out with due instances left.
                report.stopped.push("due instances");
                break Ok(());
            }
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    if let Some(tenant) = &last
        && saved.as_deref() != Some(tenant.as_str())
    {
        store.save_cursor(DUE_CURSOR, tenant.as_str()).await?;
    }
    result
}

/// What serving one tenant did.
struct Served {
    /// Due entries taken (handled, set aside or failed).
    handled: usize,
    /// Every entry of the page was looked at (false: the deadline came first).
    complete: bool,
}

async fn serve_tenant<S, Q>(
    store: &S,
    queue: &Q,
    tenant: &TenantId,
    now: Timestamp,
    limit: usize,
    deadline: Instant,
    report: &mut RunReport,
) -> Served
where
    S: SchedulerStore,
    Q: Enqueue,
{
    let page = match store.due_instances(tenant, now, limit).await {
        Ok(page) => page,
        Err(e) => {
            report.error(format!("due instances of tenant {tenant}: {e}"));
            return Served {
                handled: 0,
                complete: true,
            };
        }
    };
    let mut served = Served {
        handled: 0,
        complete: true,
    };
    let aside = Timestamp::from_millis(
        now.millis()
            .saturating_add(SKIPPED_DELAY.as_millis() as i64),
    )
    .unwrap_or(now);
    for s in &page.skipped {
        report.skipped += 1;
        report.skipped_records.push(s.record.clone());
        served.handled += 1;
        if let Err(e) = store.reschedule(&s.key, s.due, aside).await {
            report.error(format!("setting {} aside: {e}", s.key));
        }
    }
    for entry in &page.items {
        if Instant::now() >= deadline {
            served.complete = false;
            break;
        }
        served.handled += 1;
        match handle_due(store, queue, entry, now).await {
            Ok(Due::Deactivated) => report.deactivated += 1,
            Ok(Due::Scheduled) => report.scheduled += 1,
            Ok(Due::AlreadyCalculated) => report.already_calculated += 1,
            Ok(Due::Taken) => {}
            Err(e) => report.error(format!("due instance {}: {e}", entry.key)),
        }
    }
    served
}

/// What happened to one due instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Past its deactivation date: deactivated, its `instance.deactivated` event emitted.
    Deactivated,
    /// Its scheduled calculation was enqueued and its due time moved to its next slot.
    Scheduled,
    /// Its current slot was calculated before: only its due time moved.
    AlreadyCalculated,
    /// Another run moved its due time first (or its record changed): nothing done.
    Taken,
}

/// Handles one due instance. The due time moves first (conditionally: of concurrent runs
/// one goes on), then the calculation is enqueued; if that fails the due time is moved
/// back, so the next run tries again.
pub async fn handle_due<S, Q>(
    store: &S,
    queue: &Q,
    entry: &ScheduleEntry,
    now: Timestamp,
) -> StoreResult<Due>
where
    S: ActiveInstances + PriceStore + InstanceStore + EventStore,
    Q: Enqueue,
{
    let key = &entry.key;
    if entry.deactivation_date.is_some_and(|d| d <= now) {
        return Ok(if deactivate(store, queue, key, now).await? {
            Due::Deactivated
        } else {
            Due::Taken
        });
    }
    if !entry.active {
        // Indexed only for its deactivation event: no scheduled calculation; it is due
        // again at its date (a changed pricing schedule may have made it due earlier).
        if let Some(d) = entry.deactivation_date
            && d != entry.due
        {
            store.reschedule(key, entry.due, d).await?;
        }
        return Ok(Due::Taken);
    }
    let slots = schedule_slots(entry.schedule.as_ref(), entry.time_zone.as_deref(), now);
    let next = match entry.deactivation_date {
        Some(d) if d < slots.next => d,
        _ => slots.next,
    };
    if !store.reschedule(key, entry.due, next).await? {
        return Ok(Due::Taken);
    }
    let calculation_id = scheduled_calculation_id(key, slots.current);
    let sent: StoreResult<Due> = async {
        if store.has_calculation(key, &calculation_id).await? {
            return Ok(Due::AlreadyCalculated);
        }
        queue
            .send(&Message::Recalculate {
                key: key.clone(),
                calculation_id: calculation_id.clone(),
                trigger: Trigger::Schedule,
                metadata: None,
            })
            .await?;
        Ok(Due::Scheduled)
    }
    .await;
    match sent {
        Err(e) => {
            // Give the slot back; if this fails too, the calculation waits for the next slot.
            match store.reschedule(key, next, entry.due).await {
                Ok(_) => Err(e),
                Err(back) => Err(e.context(&format!("and moving the due time back: {back}"))),
            }
        }
        ok => ok,
    }
}

/// The tenants of one pass: those after `start` to the end of the list, then from the
/// beginning up to and including `start`, each once.
struct RoundRobin {
    start: Option<TenantId>,
    after: Option<TenantId>,
    wrapped: bool,
    done: bool,
    page: usize,
    buffer: VecDeque<TenantId>,
}

impl RoundRobin {
    fn new(start: Option<TenantId>, page: usize) -> Self {
        RoundRobin {
            after: start.clone(),
            start,
            wrapped: false,
            done: false,
            page,
            buffer: VecDeque::new(),
        }
    }

    async fn next<A: ActiveInstances>(&mut self, store: &A) -> StoreResult<Option<TenantId>> {
        loop {
            if self.done {
                return Ok(None);
            }
            if let Some(tenant) = self.buffer.pop_front() {
                if self.wrapped && self.start.as_ref().is_some_and(|s| tenant > *s) {
                    self.done = true;
                    return Ok(None);
                }
                self.after = Some(tenant.clone());
                return Ok(Some(tenant));
            }
            let page = store
                .scheduled_tenants(self.after.as_ref(), self.page)
                .await?;
            if page
                .iter()
                .any(|t| self.after.as_ref().is_some_and(|a| t <= a))
            {
                return Err(StoreError::Failed(
                    "scheduled_tenants went backwards".to_owned(),
                ));
            }
            if page.is_empty() {
                if self.wrapped || self.start.is_none() {
                    self.done = true;
                } else {
                    self.wrapped = true;
                    self.after = None;
                }
                continue;
            }
            self.buffer.extend(page);
        }
    }
}

trait Context {
    fn context(self, more: &str) -> Self;
}

impl Context for StoreError {
    /// The same kind of error, its message extended.
    fn context(self, more: &str) -> Self {
        match self {
            StoreError::Conflict(m) => StoreError::Conflict(format!("{m}; {more}")),
            StoreError::NotFound => StoreError::Failed(format!("not found; {more}")),
            StoreError::Unavailable(m) => StoreError::Unavailable(format!("{m}; {more}")),
            StoreError::Failed(m) => StoreError::Failed(format!("{m}; {more}")),
        }
    }
}
