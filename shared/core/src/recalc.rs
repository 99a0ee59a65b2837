//! The one recalculation path (schedule, sales, request): load the state, the latest prices
//! and the match rules, run the engine, store the calculation with its `prices.updated`
//! events. Idempotent per calculation id, so a redelivered message changes nothing.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ids::{InstanceKey, ItemId};
use crate::model::{Event, Instance, PriceCalculation, is_history_entry};
use crate::money::Money;
use crate::ports::{
    PAST_INSTANCES, PriceMatchStore, PriceStore, ProjectSales, SaveEvents, StateStore, StoreError,
    StoreResult,
};
use crate::pricing::demand::Exposure;
use crate::pricing::{
    Explain, Explanation, Previous, ProjectHistory, Trigger, calculate_explaining,
};
use crate::state::InstanceState;
use crate::time::Timestamp;

/// Prices per `prices.updated` part (DESIGN.md section 7).
pub const PRICES_PER_PART: usize = 1_000;
/// Lost races on the sequence tolerated before giving up.
const MAX_CONFLICTS: usize = 5;

/// What to calculate.
#[derive(Debug, Clone, PartialEq)]
pub struct RecalcRequest {
    pub calculation_id: String,
    pub trigger: Trigger,
    pub metadata: Option<Value>,
}

/// Runs one calculation; `None` when this calculation id was stored already. The
/// calculation returned is the one stored: explanations only on its history entries
/// (`model::is_history_entry`).
pub async fn recalculate<S, P, M>(
    states: &S,
    prices: &P,
    matches: &M,
    instance: &Instance,
    request: &RecalcRequest,
    now: Timestamp,
) -> StoreResult<Option<PriceCalculation>>
where
    S: StateStore + ProjectSales,
    P: PriceStore,
    M: PriceMatchStore,
{
    if prices
        .has_calculation(&instance.key(), &request.calculation_id)
        .await?
    {
        return Ok(None);
    }
    let state = states.load_state(&instance.key()).await?;
    recalculate_from(
        &state, None, states, prices, matches, instance, request, now,
    )
    .await
}

/// The latest prices a caller remembers: their sequence, when they were calculated, the
/// price of every item, and what the revenue model carries from one calculation to the
/// next (each item's exposure).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceHint {
    pub sequence: u64,
    pub at: Option<Timestamp>,
    pub prices: BTreeMap<ItemId, Money>,
    pub exposures: BTreeMap<ItemId, Exposure>,
}

impl PriceHint {
    pub fn of(calculation: &PriceCalculation) -> PriceHint {
        PriceHint {
            sequence: calculation.sequence,
            at: Some(calculation.calculated_at),
            prices: calculation.price_map(),
            exposures: crate::pricing::exposures_by_item(&calculation.prices),
        }
    }

    /// [`PriceHint::of`] a calculation that is no longer needed: its item ids and exposures
    /// are moved, not copied (a 100,000-item instance's are ~19 MB).
    pub fn from_calculation(calculation: PriceCalculation) -> PriceHint {
        let mut prices = Vec::with_capacity(calculation.prices.len());
        let mut exposures = Vec::new();
        for p in calculation.prices {
            if let Some(exposure) = p.exposure {
                exposures.push((p.item_id.clone(), exposure));
            }
            prices.push((p.item_id, p.price));
        }
        PriceHint {
            sequence: calculation.sequence,
            at: Some(calculation.calculated_at),
            // In item id order, as a calculation's prices are: built, not inserted one
            // by one.
            prices: prices.into_iter().collect(),
            exposures: exposures.into_iter().collect(),
        }
    }

    fn previous(&self) -> Previous<'_> {
        Previous {
            at: self.at,
            prices: &self.prices,
            exposures: &self.exposures,
        }
    }
}

/// [`recalculate`] on a state the caller has (e.g. a processor's warm cache), with the
/// latest prices it remembers. A stale hint only costs a retry: the save is conditional on
/// the sequence, and a lost race reads the stored latest prices.
#[allow(clippy::too_many_arguments)]
pub async fn recalculate_from<H, P, M>(
    state: &InstanceState,
    mut hint: Option<&PriceHint>,
    sales: &H,
    prices: &P,
    matches: &M,
    instance: &Instance,
    request: &RecalcRequest,
    now: Timestamp,
) -> StoreResult<Option<PriceCalculation>>
where
    H: ProjectSales,
    P: PriceStore,
    M: PriceMatchStore,
{
    let key = instance.key();
    let history =
        ProjectHistory::from_products(&sales.past_products(&key, PAST_INSTANCES).await?, now);
    let mut conflicts = 0;
    loop {
        if conflicts > 0
            && prices
                .has_calculation(&key, &request.calculation_id)
                .await?
        {
            return Ok(None);
        }
        let stored;
        let latest = match hint.take() {
            Some(hint) => hint,
            None => {
                stored = prices
                    .latest_prices(&key)
                    .await?
                    .map(PriceHint::from_calculation)
                    .unwrap_or_default();
                &stored
            }
        };
        let sequence = latest.sequence;
        let rules = matches.get_matches(&key).await?;
        // Stores keep an explanation only in the history, of a price that changed: the
        // others are never kept (a 100,000-item instance's explanations are ~50 MB), and
        // those of the rules' targets that ended unchanged are dropped before the save.
        let result = calculate_explaining(
            state,
            instance.is_active(now),
            request.trigger,
            now,
            &latest.previous(),
            &rules.rules,
            &history,
            Explain::Changed,
        );
        let mut priced = result.prices;
        for p in priced.iter_mut().filter(|p| !is_history_entry(p)) {
            p.explanation = Explanation::default();
        }
        let calculation = PriceCalculation {
            calculation_id: request.calculation_id.clone(),
            trigger: request.trigger,
            metadata: request.metadata.clone(),
            calculated_at: now,
            sequence: sequence + 1,
            prices: priced,
        };
        // The `prices.updated` parts are made one at a time as the store writes them.
        let events = SaveEvents::PricesUpdated {
            key: &key,
            calculation: &calculation,
        };
        match prices
            .save_calculation_with(&key, &calculation, events)
            .await
        {
            Ok(true) => return Ok(Some(calculation)),
            Ok(false) => return Ok(None),
            Err(StoreError::Conflict(_)) if conflicts < MAX_CONFLICTS => conflicts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The `prices.updated` events of a calculation: parts of at most [`PRICES_PER_PART`]
/// prices, ids derived from the calculation id and part (stable across replays).
pub fn prices_updated_events(key: &InstanceKey, calculation: &PriceCalculation) -> Vec<Event> {
    price_events(key, calculation, |part| {
        event_id(key, &calculation.calculation_id, part)
    })
}

/// The `prices.updated` events of a manual resend (trigger `manual`, the calculation's
/// own id and sequence), ids derived from the trigger id.
pub fn resent_prices_events(
    key: &InstanceKey,
    calculation: &PriceCalculation,
    trigger_id: &str,
) -> Vec<Event> {
    let resent = PriceCalculation {
        trigger: Trigger::Manual,
        ..calculation.clone()
    };
    price_events(key, &resent, |part| {
        event_id(key, &format!("manual\n{trigger_id}"), part)
    })
}

fn price_events(
    key: &InstanceKey,
    calculation: &PriceCalculation,
    id: impl Fn(usize) -> String,
) -> Vec<Event> {
    (0..price_parts(calculation))
        .map(|i| price_part(key, calculation, i, id(i + 1)))
        .collect()
}

/// How many `prices.updated` parts a calculation has: one per [`PRICES_PER_PART`] prices,
/// and one (with no prices) when it priced nothing.
pub fn price_parts(calculation: &PriceCalculation) -> usize {
    calculation.prices.len().div_ceil(PRICES_PER_PART).max(1)
}

/// The `prices.updated` part `index` (from 0) of a calculation, with its `prices.updated`
/// id (see [`prices_updated_events`]).
pub fn prices_updated_part(
    key: &InstanceKey,
    calculation: &PriceCalculation,
    index: usize,
) -> Event {
    let id = event_id(key, &calculation.calculation_id, index + 1);
    price_part(key, calculation, index, id)
}

fn price_part(
    key: &InstanceKey,
    calculation: &PriceCalculation,
    index: usize,
    id: String,
) -> Event {
    let from = (index * PRICES_PER_PART).min(calculation.prices.len());
    let to = (from + PRICES_PER_PART).min(calculation.prices.len());
    let prices: Vec<Value> = calculation.prices[from..to]
        .iter()
        .map(|p| {
            json!({
                "itemId": p.item_id,
                "price": p.price,
                "previousPrice": p.previous_price,
                "changed": p.changed,
            })
        })
        .collect();
    let mut data = json!({
        "calculationId": calculation.calculation_id,
        "trigger": calculation.trigger,
        "calculatedAt": calculation.calculated_at,
        "sequence": calculation.sequence,
        "part": index + 1,
        "parts": price_parts(calculation),
        "prices": prices,
    });
    if let Some(m) = &calculation.metadata {
        data["metadata"] = m.clone();
    }
    Event {
        id,
        event_type: "prices.updated".into(),
        project_id: key.project_id.clone(),
        instance_id: key.instance_id.clone(),
        created_at: calculation.calculated_at,
        data,
    }
}

fn event_id(key: &InstanceKey, calculation_id: &str, part: usize) -> String {
    let mut hash = Sha256::new();
    hash.update(format!("prices.updated\n{key}\n{calculation_id}\n{part}"));
    let digest = hash.finalize();
    let id: String = digest[..13].iter().map(|b| format!("{b:02x}")).collect();
    format!("evt_{id}")
}

/// The calculation id of a scheduled run: one per (instance, slot), so the run is
/// idempotent however often the scheduler fires.
pub fn scheduled_calculation_id(key: &InstanceKey, slot: Timestamp) -> String {
    let mut hash = Sha256::new();
    hash.update(format!(
        "schedule\n{}\n{}",
        key.storage_key(),
        slot.millis()
    ));
    let digest = hash.finalize();
    let id: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("sch_{id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::SaveEvents;
    use crate::pricing::ItemPrice;

    fn calculation(prices: usize) -> PriceCalculation {
        let prices = (0..prices)
            .map(|n| {
                serde_json::from_value::<ItemPrice>(json!({
                    "itemId": format!("seat-{n:05}"),
                    "price": 10.0 + n as f64,
                    "previousPrice": null,
                    "changed": true,
                    "status": "calculated",
                    "explanation": {},
                }))
                .expect("an item price")
            })
            .collect();
        PriceCalculation {
            calculation_id: "calc-1".into(),
            trigger: Trigger::Request,
            metadata: Some(json!({"batch": 7})),
            calculated_at: Timestamp::from_millis(1_780_000_000_000).expect("a time"),
            sequence: 3,
            prices,
        }
    }

    /// The hint made by moving a calculation is the one made by copying it.
    #[test]
    fn a_hint_moved_out_of_a_calculation_is_the_copied_one() {
        let mut c = calculation(5);
        for (n, p) in c.prices.iter_mut().enumerate().filter(|(n, _)| n % 2 == 0) {
            p.exposure = Some(Exposure {
                levels: vec![(0.1 * n as f64, 1.0), (0.5, 0.9)],
                ..Exposure::default()
            });
        }
        let copied = PriceHint::of(&c);
        assert_eq!(copied.exposures.len(), 3);
        assert_eq!(copied.prices.len(), 5);
        assert_eq!(PriceHint::from_calculation(c), copied);
    }

    /// The parts a store makes one at a time are the parts of `prices_updated_events`:
    /// none missing at a part's edge, one empty part when nothing was priced.
    #[test]
    fn parts_made_one_at_a_time_are_the_listed_parts() {
        let key = InstanceKey::new(
            crate::ids::TenantId::from_claim("tenant").expect("a tenant"),
            crate::ids::ProjectId::parse("p").expect("a project id"),
            crate::ids::InstanceId::parse("i").expect("an instance id"),
        );
        for (prices, parts) in [(0, 1), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (2_500, 3)] {
            let c = calculation(prices);
            let listed = prices_updated_events(&key, &c);
            let lazy = SaveEvents::PricesUpdated {
                key: &key,
                calculation: &c,
            };
            assert_eq!(lazy.len(), parts, "{prices} prices");
            let made: Vec<Event> = lazy.iter().map(|e| e.into_owned()).collect();
            assert_eq!(made, listed, "{prices} prices");
            let priced: usize = made
                .iter()
                .map(|e| e.data["prices"].as_array().map_or(0, Vec::len))
                .sum();
            assert_eq!(priced, prices);
            assert!(made.iter().all(|e| e.data["parts"] == parts));
        }
    }
}
