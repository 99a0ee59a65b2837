//! Handling one work message, the same way in the standalone workers and in the Lambda
//! functions (entry-processor, recalculator).

use crate::model::Message;
use crate::ports::{
    DeliveryStore, Enqueue, EntryLog, EventStore, InstanceStore, PriceMatchStore, PriceStore,
    ProjectSales, StateStore, StoreError, StoreResult, SubscriptionStore,
};
use crate::pricing::Trigger;
use crate::process::{ProcessReport, Processor};
use crate::recalc::{PriceHint, RecalcRequest, recalculate_from};
use crate::time::Timestamp;
use crate::webhooks::{DispatchReport, dispatch};

/// What the instance-work consumers need of storage.
pub trait WorkStore:
    EntryLog
    + StateStore
    + InstanceStore
    + PriceStore
    + PriceMatchStore
    + EventStore
    + SubscriptionStore
    + DeliveryStore
    + ProjectSales
{
}

impl<S> WorkStore for S where
    S: EntryLog
        + StateStore
        + InstanceStore
        + PriceStore
        + PriceMatchStore
        + EventStore
        + SubscriptionStore
        + DeliveryStore
        + ProjectSales
{
}

/// What handling a message did (the caller logs it).
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    /// A log tail was applied; `recalculation` names the sales-triggered calculation asked for.
    Processed {
        report: ProcessReport,
        recalculation: Option<String>,
        dispatched: DispatchReport,
    },
    /// A calculation was stored with this sequence.
    Calculated {
        calculation_id: String,
        sequence: u64,
        prices: usize,
        /// Prices that differ from the previous ones (an item's first price counts).
        changed: usize,
        /// What applying the log tail just before pricing did.
        apply: ProcessReport,
        /// Log entries applied (or rejected) just before pricing.
        applied: u64,
        /// The log sequence the priced state reflects.
        applied_seq: u64,
        dispatched: DispatchReport,
    },
    /// The calculation was stored before (a redelivered message).
    AlreadyCalculated {
        calculation_id: String,
        dispatched: DispatchReport,
    },
    /// The instance is past its deactivation date, the absolute end of its pricing
    /// (INTERFACE.md): a calculation asked for before it (a request queued, a sales
    /// trigger) is not made.
    Deactivated { calculation_id: String },
    /// A scheduled calculation of an instance that is not active (turned off after the
    /// run was asked for) is not made: such runs price only the items of active instances,
    /// so it would price nothing and publish every item as kept (an outside probe saw such
    /// an empty `prices.updated`). Sales runs price inactive instances (the flag is
    /// scheduled pricing's, INTERFACE.md).
    Inactive { calculation_id: String },
    /// The instance no longer exists; nothing to do.
    UnknownInstance,
}

/// Handles one message of the process or recalc lane; after the work, the instance's new
/// events are dispatched to its subscriptions. Errors are worth retrying (the message is
/// redelivered).
pub async fn handle<S, Q>(
    store: &S,
    queue: &Q,
    processor: &Processor,
    message: &Message,
    now: Timestamp,
) -> StoreResult<Handled>
where
    S: WorkStore,
    Q: Enqueue,
{
    match message {
        Message::ProcessInstance { key } => {
            let (report, recalculation) = apply_tail(store, queue, processor, key, now).await?;
            let dispatched = dispatch(store, queue, key, now).await?;
            Ok(Handled::Processed {
                report,
                recalculation,
                dispatched,
            })
        }
        Message::Recalculate {
            key,
            calculation_id,
            trigger,
            metadata,
        } => {
            let Some(instance) = store.get_instance(key).await? else {
                return Ok(Handled::UnknownInstance);
            };
            // The sales calculation this message is was asked for: the run below need not
            // ask again (on AWS the recalculator is another function than the processor
            // that asked).
            if *trigger == Trigger::Sales
                && let Some(seq) = sales_calculation_seq(key, calculation_id)
            {
                processor.sales_calculation_asked(key, seq);
            }
            let request = RecalcRequest {
                calculation_id: calculation_id.clone(),
                trigger: *trigger,
                metadata: metadata.clone(),
            };
            if store.has_calculation(key, calculation_id).await? {
                // A redelivered message: its events may not have been dispatched yet.
                return Ok(Handled::AlreadyCalculated {
                    calculation_id: calculation_id.clone(),
                    dispatched: dispatch(store, queue, key, now).await?,
                });
            }
            if instance.is_deactivated(now) {
                return Ok(Handled::Deactivated {
                    calculation_id: calculation_id.clone(),
                });
            }
            if *trigger == Trigger::Schedule && !instance.is_active(now) {
                return Ok(Handled::Inactive {
                    calculation_id: calculation_id.clone(),
                });
            }
            // A calculation reflects every entry acknowledged before it was asked for: on
            // AWS its message travels on the recalc queue, apart from the process queue's
            // wake-up, and may arrive first. Applying the log tail here (conditional on the
            // applied sequence, as every processor run is) orders the two.
            let (applied, _) = apply_tail(store, queue, processor, key, now).await?;
            // The processor's warm state and the prices it remembers spare reloading a
            // large instance for every calculation; the state is shared with the reads
            // that come meanwhile (a calculation only reads it).
            let state = processor.shared_state(store, key).await?;
            let hint = processor.take_price_hint(key);
            let result = recalculate_from(
                &state,
                hint.as_ref(),
                store,
                store,
                store,
                &instance,
                &request,
                now,
            )
            .await;
            drop(state);
            let stored = match result {
                // The calculation becomes the prices remembered (the ones taken went before
                // it was made) before the events are dispatched: it is not held meanwhile.
                Ok(Some(c)) => {
                    drop(hint);
                    let summary = (
                        c.calculation_id.clone(),
                        c.sequence,
                        c.prices.len(),
                        c.prices.iter().filter(|p| p.changed).count(),
                    );
                    processor.remember_prices(key, PriceHint::from_calculation(c));
                    Some(summary)
                }
                // Nothing stored: they are what was known (a stale hint costs a retry).
                other => {
                    if let Some(hint) = hint {
                        processor.remember_prices(key, hint);
                    }
                    other?;
                    None
                }
            };
            let dispatched = dispatch(store, queue, key, now).await?;
            Ok(match stored {
                Some((calculation_id, sequence, prices, changed)) => Handled::Calculated {
                    calculation_id,
                    sequence,
                    prices,
                    changed,
                    applied: applied.applied + applied.rejected,
                    applied_seq: applied.applied_seq,
                    apply: applied,
                    dispatched,
                },
                None => Handled::AlreadyCalculated {
                    calculation_id: calculation_id.clone(),
                    dispatched,
                },
            })
        }
        Message::Deliver { .. } | Message::Trigger { .. } => Err(StoreError::Failed(format!(
            "{message:?} belongs to the webhooks lane, not to instance work"
        ))),
    }
}

/// Applies the instance's log tail; a sales threshold crossed by it asks for a
/// sales-triggered calculation (its id, one per crossing run, names the sequence it saw).
async fn apply_tail<S, Q>(
    store: &S,
    queue: &Q,
    processor: &Processor,
    key: &crate::ids::InstanceKey,
    now: Timestamp,
) -> StoreResult<(ProcessReport, Option<String>)>
where
    S: WorkStore,
    Q: Enqueue,
{
    let report = processor.process(store, store, key, now).await?;
    let mut recalculation = None;
    // This run's crossing, or an earlier one whose request may have been lost after its
    // commit (the id names the sequence: asked twice, it is calculated once).
    if let Some(applied_seq) = report.sales_calculation {
        let calculation_id = sales_calculation_id(key, applied_seq);
        // An earlier run's calculation that is stored already was asked for.
        let stored =
            !report.sales_threshold_crossed && store.has_calculation(key, &calculation_id).await?;
        if !stored {
            queue
                .send(&Message::Recalculate {
                    key: key.clone(),
                    calculation_id: calculation_id.clone(),
                    trigger: Trigger::Sales,
                    metadata: None,
                })
                .await?;
            recalculation = Some(calculation_id);
        }
        processor.sales_calculation_asked(key, applied_seq);
    }
    Ok((report, recalculation))
}

/// The id of the sales-triggered calculation asked for at `applied_seq`: one per crossing
/// run, so asking twice calculates once.
fn sales_calculation_id(key: &crate::ids::InstanceKey, applied_seq: u64) -> String {
    format!("sales_{}_{applied_seq}", key.instance_id)
}

/// The applied sequence a sales calculation id names ([`sales_calculation_id`]).
fn sales_calculation_seq(key: &crate::ids::InstanceKey, calculation_id: &str) -> Option<u64> {
    calculation_id
        .strip_prefix("sales_")?
        .strip_prefix(key.instance_id.as_str())?
        .strip_prefix('_')?
        .parse()
        .ok()
}

impl std::fmt::Display for Handled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handled::Processed {
                report,
                recalculation,
                dispatched,
            } => {
                write!(
                    f,
                    "applied {} entries ({} rejected) up to sequence {}",
                    report.applied, report.rejected, report.applied_seq
                )?;
                if let Some(id) = recalculation {
                    write!(f, "; sales threshold crossed, asked for calculation {id}")?;
                }
                write_dispatched(f, dispatched)
            }
            Handled::Calculated {
                calculation_id,
                sequence,
                prices,
                applied,
                applied_seq,
                dispatched,
                ..
            } => {
                write!(
                    f,
                    "calculation {calculation_id}: {prices} prices, sequence {sequence}, \
                     state at log sequence {applied_seq}"
                )?;
                if *applied > 0 {
                    write!(f, " ({applied} entries applied first)")?;
                }
                write_dispatched(f, dispatched)
            }
            Handled::AlreadyCalculated {
                calculation_id,
                dispatched,
            } => {
                write!(f, "calculation {calculation_id} was stored before")?;
                write_dispatched(f, dispatched)
            }
            Handled::Deactivated { calculation_id } => write!(
                f,
                "calculation {calculation_id} not made: the instance is past its deactivation date"
            ),
            Handled::Inactive { calculation_id } => write!(
                f,
                "calculation {calculation_id} not made: the instance is not active (a scheduled run would price nothing)"
            ),
            Handled::UnknownInstance => write!(f, "the instance does not exist; message dropped"),
        }
    }
}

fn write_dispatched(f: &mut std::fmt::Formatter<'_>, d: &DispatchReport) -> std::fmt::Result {
    if d.events == 0 {
        return Ok(());
    }
    write!(
        f,
        "; {} events dispatched as {} webhooks",
        d.events, d.deliveries
    )
}
