//! The simulated market: buyers arrive continuously, every instance is built and priced
//! through the real apply step and engine, and each model meets the same buyers.
//!
//! - Buyers: per run, instance and item, a Poisson process of mean `arrivals` whose times
//!   follow the item's shape (exponential gaps in cumulative intensity, mapped through the
//!   inverse of the normalised shape), each with a willingness to pay drawn from the item's
//!   distribution. The draws depend only on (seed, run, instance, item), so every model
//!   meets the same buyers (common random numbers); instances are counted back from the
//!   scored one, so the scored instance meets the same buyers whatever `pastInstances` is.
//! - An instance: the main date (the end of its sales period, or the logged meta), the
//!   product (capacity shared by its items, expectedSales, the model under test) and its
//!   items are registered as entries through the real parser and apply step. The engine
//!   prices at the start of every slot ([`price_slot`]; the first at share 0); a buyer
//!   arriving in a slot buys one unit if their willingness to pay is at least the item's
//!   price and the product has a unit left, and the sale is applied as an `itemSale` entry
//!   with its timestamp and the price paid. Once the product is sold out the remaining
//!   slots are not priced (nobody can buy).
//! - Past instances: the `pastInstances` earlier instances of the same project run first,
//!   one sales period after another, priced by the model under test; each leaves its final
//!   [`InstanceState`] in a [`PastInstance`] that every later calculation receives (what
//!   the service's recalculation reads of a past instance). Only the last instance is
//!   scored.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use pricing_core::entry::{Entry, EntryKind, ItemSale, ParseOptions, PricingModel, parse_entry};
use pricing_core::money::Money;
use pricing_core::ports::PAST_INSTANCES;
use pricing_core::pricing::{
    Calculation, Previous, ProjectHistory, Trigger, calculate_with, exposures_by_item,
    prices_by_item,
};
use pricing_core::state::{Dirty, InstanceState};
use pricing_core::time::Timestamp;
use pricing_core::validate::Errors;
use serde_json::{Map, Value, json};

use crate::scenario::Scenario;
use crate::{Error, ModelChoice, Progress, fail};

/// The product of a simulated market.
pub const MARKET_PRODUCT: &str = "simulated-product";

/// An earlier instance of the project, as a learning model would see it.
#[derive(Debug, Clone)]
pub struct PastInstance {
    /// The instance's state after its last sale.
    pub state: InstanceState,
    /// How many price calculations it made, and when the first one was.
    pub calculations: u64,
    pub first_calculation: Option<Timestamp>,
}

/// The project's past instances as the engine sees them: the instances and the booking
/// curves they teach, learned once per instance priced at its start (they have ended and
/// do not change while it runs; the service learns them before each recalculation).
pub struct Past<'a> {
    pub instances: &'a [PastInstance],
    history: ProjectHistory,
}

impl<'a> Past<'a> {
    pub fn new(instances: &'a [PastInstance], now: Timestamp) -> Self {
        Past {
            instances,
            history: ProjectHistory::learn(instances.iter().map(|p| &p.state), now),
        }
    }
}

/// The engine call for one pricing slot: the scheduled calculation of `state` at `now`,
/// given this instance's previous calculation (its time, prices and the revenue model's
/// exposures; `maxStepChange` caps against the prices) and the project's past instances
/// (the booking curves they teach), as the service's recalculation passes them.
pub fn price_slot(
    state: &InstanceState,
    previous: Option<&Calculation>,
    now: Timestamp,
    past: &Past<'_>,
) -> Calculation {
    let (prices, exposures) = match previous {
        Some(c) => (prices_by_item(&c.prices), exposures_by_item(&c.prices)),
        None => Default::default(),
    };
    let last = Previous {
        at: previous.map(|c| c.calculated_at),
        prices: &prices,
        exposures: &exposures,
    };
    calculate_with(
        state,
        true,
        Trigger::Schedule,
        now,
        &last,
        &[],
        &past.history,
    )
}

// ---------------------------------------------------------------------------------------
// Random numbers

/// SplitMix64: a small, fast, deterministic generator (Steele, Lea, Flood 2014).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in the open interval (0, 1).
    pub fn next_f64(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// The generator of one stream: the seed and the stream's coordinates, mixed.
    pub fn stream(seed: u64, coordinates: &[u64]) -> Self {
        let mut mixer = SplitMix64::new(seed);
        let mut state = mixer.next_u64();
        for c in coordinates {
            mixer = SplitMix64::new(state ^ c.wrapping_mul(0xD6E8_FEB8_6659_FD93));
            state = mixer.next_u64();
        }
        SplitMix64::new(state)
    }
}

/// A potential buyer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Buyer {
    /// Elapsed share of the sales period at arrival, in [0, 1).
    pub share: f64,
    /// Index of the item in the scenario.
    pub item: usize,
    pub wtp: f64,
}

/// The buyers of one instance (`back` instances before the scored one) in `run`, in time
/// order.
pub fn buyers(s: &Scenario, run: u32, back: u32) -> Vec<Buyer> {
    let mut all: Vec<Buyer> = Vec::new();
    for (index, item) in s.items.iter().enumerate() {
        let mut rng = SplitMix64::stream(s.seed, &[u64::from(run), u64::from(back), index as u64]);
        let mut level = 0.0;
        loop {
            level -= rng.next_f64().ln();
            if level >= item.arrivals {
                break;
            }
            let share = item.shape.inverse(level / item.arrivals).min(1.0 - 1e-12);
            all.push(Buyer {
                share,
                item: index,
                wtp: item.wtp.sample(rng.next_f64()),
            });
        }
    }
    if s.items.len() > 1 {
        all.sort_by(|a, b| a.share.total_cmp(&b.share));
    }
    all
}

// ---------------------------------------------------------------------------------------
// One instance

/// Validates `entry` as at submission and applies it as the processor does; errors name
/// what was applied and the first problem.
pub fn apply_json(state: &mut InstanceState, entry: &Value, what: &str) -> Result<(), Error> {
    let mut errors = Errors::default();
    let parsed = parse_entry(entry, "", ParseOptions::default(), &mut errors).ok_or_else(|| {
        let detail = errors
            .list
            .first()
            .map(|e| format!("{} {}", e.pointer, e.message))
            .unwrap_or_default();
        fail(format!("{what}: {detail}"))
    })?;
    apply_entry(state, &parsed, what)
}

fn apply_entry(state: &mut InstanceState, entry: &Entry, what: &str) -> Result<(), Error> {
    let seq = state.header.applied_seq + 1;
    state
        .apply_logged(entry, seq, &mut Dirty::default())
        .map_err(|r| fail(format!("{what}: {}", r.message)))
}

fn timestamp(millis: i64) -> Result<Timestamp, Error> {
    Timestamp::from_millis(millis).ok_or_else(|| fail("the simulated period is out of range"))
}

/// Start of the instance `back` instances before the scored one.
///
/// Every instance ends within the year 9999, the last a time the service reads (a file of
/// 1,000 past instances of 10,000 days ran past it, and failed naming the item's price
/// settings, whose sales period no longer parsed).
fn instance_start(s: &Scenario, back: u32) -> Result<i64, Error> {
    let instances = i64::from(s.past_instances) + 1;
    let last_end = instances
        .checked_mul(s.period_ms)
        .and_then(|span| s.context.start.millis().checked_add(span));
    if last_end.is_none_or(|end| end > Timestamp::LAST_MILLIS) {
        return Err(fail(format!(
            "pastInstances + 1 = {instances} instances of {} days run past the year 9999 from {}: use fewer past instances or a shorter period",
            s.period_ms as f64 / 86_400_000.0,
            s.context.start.to_rfc3339()
        )));
    }
    let offset = i64::from(s.past_instances.saturating_sub(back)) * s.period_ms;
    Ok(s.context.start.millis() + offset)
}

/// A new instance of the market starting at `start` (ms), its product priced by `model`.
pub fn instance_state(
    s: &Scenario,
    model: &PricingModel,
    start: i64,
) -> Result<InstanceState, Error> {
    let (from, to) = (timestamp(start)?, timestamp(start + s.period_ms)?);
    let mut state = InstanceState::default();
    match &s.context.meta {
        // A logged instance's meta, as it was stored (checked when it was applied): taken
        // as it is, not sent again as a patch, which would refuse a member name that
        // patches may no longer make, and re-read its values through serde_json's own
        // `Value` (an object whose first member serde_json reserves did not read).
        Some(meta) => {
            let mut meta = meta.clone();
            pricing_core::meta::normalise_dates(&mut meta);
            state.header.meta = meta;
        }
        None => apply_json(
            &mut state,
            &json!({"type": "instanceMetadata", "data": {"patch": [{
            "op": "add", "path": "/dates", "value": [{
                "date": {"start": to, "end": to},
                "tags": ["main"],
                "description": "simulated event",
            }]}]}}),
            "the instance's main date",
        )?,
    }
    let mut product: Map<String, Value> = s.context.product.clone();
    product.insert("productId".into(), json!(MARKET_PRODUCT));
    product.insert("capacity".into(), json!(s.capacity));
    product.insert("expectedSales".into(), json!(s.expected_sales));
    product.insert(
        "pricingModel".into(),
        serde_json::to_value(model).map_err(|e| fail(format!("the pricing model: {e}")))?,
    );
    apply_json(
        &mut state,
        &json!({"type": "productRegistration", "data": product}),
        "capacity, expectedSales or the pricing model",
    )?;
    for (i, item) in s.items.iter().enumerate() {
        apply_json(
            &mut state,
            &json!({"type": "itemRegistration", "data": {
                "itemId": item.item_id,
                "productId": MARKET_PRODUCT,
                "salesPeriod": {"start": from, "end": to},
                "priceSettings": {"min": item.min, "max": item.max, "default": item.default},
            }}),
            &format!("items/{i}/priceSettings"),
        )?;
    }
    Ok(state)
}

/// Units the product has left.
fn available(state: &InstanceState) -> u64 {
    let totals = state.product_totals();
    state
        .products
        .values()
        .map(|p| {
            let t = totals.get(&p.product_id).copied().unwrap_or_default();
            InstanceState::product_counts(p, &t).available
        })
        .sum()
}

/// Runs one instance (`back` instances before the scored one) with its buyers.
pub fn run_instance(
    s: &Scenario,
    model: &PricingModel,
    back: u32,
    buyers: &[Buyer],
    past: &[PastInstance],
) -> Result<PastInstance, Error> {
    let start = instance_start(s, back)?;
    let mut state = instance_state(s, model, start)?;
    let past = Past::new(past, timestamp(start)?);
    let slots = s.slots;
    // Only the latest calculation is kept: the next one reads it (its prices and the
    // revenue model's exposures), and nothing reads the others. Kept whole, they took
    // about 700 bytes a slot for every instance of a run (7 GB for 10 past instances of
    // a million slots: docs/api.md, "Simulations").
    let mut last: Option<Calculation> = None;
    let (mut calculations, mut first_calculation) = (0, None);
    let mut left = available(&state);
    let mut prices: Vec<(Money, f64)> = vec![(Money::ZERO, 0.0); s.items.len()];
    let mut next = 0;
    let slot_of = |share: f64| ((share * slots as f64) as u64).min(slots - 1);
    for k in 0..slots {
        if left == 0 {
            break;
        }
        let offset = i128::from(s.period_ms) * i128::from(k) / i128::from(slots);
        let now = timestamp(start + offset as i64)?;
        let calculation = price_slot(&state, last.as_ref(), now, &past);
        for (slot, item) in prices.iter_mut().zip(&s.items) {
            let price = calculation
                .get(&item.item_id)
                .map(|p| p.price)
                .ok_or_else(|| fail(format!("the engine did not price {}", item.item_id)))?;
            *slot = (price, price.to_f64());
        }
        calculations += 1;
        first_calculation.get_or_insert(calculation.calculated_at);
        last = Some(calculation);
        while let Some(buyer) = buyers.get(next).filter(|b| slot_of(b.share) <= k) {
            next += 1;
            let (price, value) = prices[buyer.item];
            if left == 0 || buyer.wtp < value {
                continue;
            }
            let at = timestamp(start + (buyer.share * s.period_ms as f64) as i64)?;
            let sale = Entry {
                transaction_id: None,
                timestamp: Some(at),
                kind: EntryKind::ItemSale(ItemSale {
                    item_id: s.items[buyer.item].item_id.clone(),
                    quantity: 1,
                    price,
                    base_price: None,
                    pool: false,
                    currency: None,
                    tax: None,
                    breakdown: Vec::new(),
                    sold_at: Some(at),
                }),
            };
            apply_entry(&mut state, &sale, "a simulated sale")?;
            left = available(&state);
        }
    }
    Ok(PastInstance {
        state,
        calculations,
        first_calculation,
    })
}

/// Revenue and units sold of an instance.
pub fn outcome(state: &InstanceState) -> (f64, u64) {
    let revenue: i128 = state
        .items
        .values()
        .map(|i| i128::from(i.revenue_micros))
        .sum();
    let sold = state.items.values().map(|i| i.sold).sum();
    (revenue as f64 / 1e6, sold)
}

// ---------------------------------------------------------------------------------------
// Monte Carlo

/// The scored instance's revenue and units sold, per run, of one model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    pub revenue: Vec<f64>,
    pub units: Vec<f64>,
}

fn model_of<'a>(s: &'a Scenario, choice: &'a ModelChoice) -> Result<&'a PricingModel, Error> {
    choice
        .model
        .as_ref()
        .or(s.context.own_model.as_ref())
        .ok_or_else(|| fail("`current` (each product's own model) needs a log: use `simulate log`"))
}

/// Revenue and units of the scored instance, per model, in one run.
type RunOutcome = Vec<(f64, u64)>;

/// One run: every model through the past instances and the scored one, on the same buyers.
/// Each instance learns from the [`PAST_INSTANCES`] before it, as the service's
/// recalculation reads them; the older ones are dropped, and an instance's buyers are drawn
/// when it runs (the same for every model: they depend on the run and the instance only),
/// so a run holds one crowd and at most that many past instances whatever
/// `pastInstances` is.
fn run_once(s: &Scenario, models: &[&PricingModel], run: u32) -> Result<RunOutcome, Error> {
    models
        .iter()
        .map(|model| {
            let mut past: std::collections::VecDeque<PastInstance> =
                std::collections::VecDeque::with_capacity(PAST_INSTANCES + 1);
            for back in (1..=s.past_instances).rev() {
                let done = run_instance(
                    s,
                    model,
                    back,
                    &buyers(s, run, back),
                    past.make_contiguous(),
                )?;
                past.push_back(done);
                if past.len() > PAST_INSTANCES {
                    past.pop_front();
                }
            }
            let scored = run_instance(s, model, 0, &buyers(s, run, 0), past.make_contiguous())?;
            Ok(outcome(&scored.state))
        })
        .collect()
}

/// Runs the scenario's Monte Carlo runs for every model on `threads` threads (at least
/// one); `progress` advances by one per run. The result does not depend on the number of
/// threads.
pub fn simulate(
    s: &Scenario,
    choices: &[ModelChoice],
    threads: usize,
    progress: &dyn Progress,
) -> Result<Vec<Sample>, Error> {
    let models: Vec<&PricingModel> = choices
        .iter()
        .map(|c| model_of(s, c))
        .collect::<Result<_, _>>()?;
    // Fail early, with the field, on a product or item the real parser refuses.
    for model in &models {
        instance_state(s, model, s.context.start.millis())?;
    }
    progress.set_length(u64::from(s.runs));
    let threads = threads.min(s.runs as usize).max(1);
    let next = AtomicU32::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<RunOutcome>>> = Mutex::new(vec![None; s.runs as usize]);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let run = next.fetch_add(1, Ordering::Relaxed);
                    if run >= s.runs {
                        break;
                    }
                    match run_once(s, &models, run) {
                        Ok(outcomes) => {
                            if let Ok(mut r) = results.lock() {
                                r[run as usize] = Some(outcomes);
                            }
                            progress.inc(1);
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let results = results
        .into_inner()
        .map_err(|_| fail("a simulation thread panicked"))?;
    let mut samples = vec![Sample::default(); models.len()];
    for run in results {
        let run = run.ok_or_else(|| fail("a simulation run did not finish"))?;
        for (sample, (revenue, units)) in samples.iter_mut().zip(run) {
            sample.revenue.push(revenue);
            sample.units.push(units as f64);
        }
    }
    Ok(samples)
}
