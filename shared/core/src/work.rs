//! Handling one work message, the same way in the standalone workers and in the Lambda
//! functions (entry-processor, recalculator).

use crate::model::Message;
use crate::ports::{
    Enqueue, EntryLog, InstanceStore, PriceMatchStore, PriceStore, StateStore, StoreResult,
};
use crate::pricing::Trigger;
use crate::process::{ProcessReport, Processor};
use crate::recalc::{RecalcRequest, recalculate_from};
use crate::time::Timestamp;

/// What handling a message did (the caller logs it).
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    /// A log tail was applied; `recalculation` names the sales-triggered calculation asked for.
    Processed {
        report: ProcessReport,
        recalculation: Option<String>,
    },
    /// A calculation was stored with this sequence.
    Calculated {
        calculation_id: String,
        sequence: u64,
        prices: usize,
    },
    /// The calculation was stored before (a redelivered message).
    AlreadyCalculated { calculation_id: String },
    /// The instance no longer exists; nothing to do.
    UnknownInstance,
}

/// Handles one message. Errors are worth retrying (the message is redelivered).
pub async fn handle<S, Q>(
    store: &S,
    queue: &Q,
    processor: &Processor,
    message: &Message,
    now: Timestamp,
) -> StoreResult<Handled>
where
    S: EntryLog + StateStore + InstanceStore + PriceStore + PriceMatchStore,
    Q: Enqueue,
{
    match message {
        Message::ProcessInstance { key } => {
            let report = processor.process(store, store, key, now).await?;
            let mut recalculation = None;
            if report.sales_threshold_crossed {
                // One calculation per crossing run, named by the sequence it saw.
                let calculation_id = format!("sales_{}_{}", key.instance_id, report.applied_seq);
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
            Ok(Handled::Processed {
                report,
                recalculation,
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
            let request = RecalcRequest {
                calculation_id: calculation_id.clone(),
                trigger: *trigger,
                metadata: metadata.clone(),
            };
            if store.has_calculation(key, calculation_id).await? {
                return Ok(Handled::AlreadyCalculated {
                    calculation_id: calculation_id.clone(),
                });
            }
            // The processor's warm state and the prices it remembers spare reloading a
            // large instance for every calculation.
            let state = processor.take_state(store, key).await?;
            let hint = processor.price_hint(key);
            let result = recalculate_from(
                &state,
                hint.as_ref(),
                store,
                store,
                &instance,
                &request,
                now,
            )
            .await;
            processor.return_state(key, state);
            let result = result?;
            Ok(match result {
                Some(c) => {
                    processor.remember_prices(key, c.sequence, c.price_map());
                    Handled::Calculated {
                        calculation_id: c.calculation_id,
                        sequence: c.sequence,
                        prices: c.prices.len(),
                    }
                }
                None => Handled::AlreadyCalculated {
                    calculation_id: calculation_id.clone(),
                },
            })
        }
    }
}

impl std::fmt::Display for Handled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handled::Processed {
                report,
                recalculation,
            } => {
                write!(
                    f,
                    "applied {} entries ({} rejected) up to sequence {}",
                    report.applied, report.rejected, report.applied_seq
                )?;
                match recalculation {
                    Some(id) => write!(f, "; sales threshold crossed, asked for calculation {id}"),
                    None => Ok(()),
                }
            }
            Handled::Calculated {
                calculation_id,
                sequence,
                prices,
            } => write!(
                f,
                "calculation {calculation_id}: {prices} prices, sequence {sequence}"
            ),
            Handled::AlreadyCalculated { calculation_id } => {
                write!(
                    f,
                    "calculation {calculation_id} was stored before; nothing to do"
                )
            }
            Handled::UnknownInstance => write!(f, "the instance does not exist; message dropped"),
        }
    }
}
