//! `standalone simulate`: compares pricing models before switching (DESIGN.md section 6).
//!
//! - `simulate market` generates a market: one product and one item over a sales period of
//!   `--days`, priced by the engine at every step (a scheduled recalculation,
//!   `--steps-per-day` of them a day), with Poisson demand of mean
//!   `base_demand / steps_per_day * (price / default)^elasticity * (0.5 + 1.5 * tau)`
//!   (tau = elapsed share of the sales period: demand rises towards the event). What sells
//!   is applied as an `itemSale` entry through the real apply step, so the counts evolve as
//!   in the service. Every model meets the same demand draws: each has its own generator
//!   seeded with `--seed`, and every step uses exactly one uniform draw (inverse-transform
//!   sampling), so the models are compared on common random numbers.
//! - `simulate log` replays an instance's entry log from a data directory through the
//!   apply step; at every `itemSale` each model prices the item (a `request` calculation on
//!   the state before the sale, with every product switched to that model) and earns
//!   quantity * its price. The quantities are the log's, so sell-through is the log's and
//!   only revenue differs by model. The instance `meta` (its dates: the main date of
//!   timeBased) given at creation is not in the log, so the replay uses the instance's
//!   current meta throughout and skips the log's instanceMetadata entries.
//!
//! Output: a plain table on stdout, one line per model; a progress bar on stderr unless
//! stderr is not a terminal or `--quiet` is given.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use pricing_core::entry::{
    Entry, EntryKind, ItemSale, ParseOptions, PricingModel, Tier, TimeStep, parse_entry,
    product_props_from_doc,
};
use pricing_core::ids::{InstanceId, InstanceKey, ItemId, ProjectId};
use pricing_core::jws::decode_jws_payload;
use pricing_core::money::Money;
use pricing_core::ports::{
    EntryLog, InstanceStore, PriceMatchStore, ProjectStore, StateStore, StoreError,
};
use pricing_core::pricing::{PriceMatch, Trigger, calculate};
use pricing_core::state::{Dirty, InstanceState};
use pricing_core::time::Timestamp;
use pricing_core::validate::Errors;
use pricing_embedded::EmbeddedStore;
use serde_json::{Map, Value, json};

use crate::Error;
use crate::cli::{LogArgs, MarketArgs, SimulateArgs, SimulateSource};

/// The database file inside a data directory (as `serve` names it).
const DATABASE_FILE: &str = "pricing.db";
/// Log entries read per round trip.
const READ_PAGE: usize = 500;
/// Most steps of a generated market.
const MAX_STEPS: u64 = 10_000_000;
const MILLIS_PER_DAY: i64 = 86_400_000;
/// Start of a generated market's sales period (fixed, so runs are reproducible).
const MARKET_START: &str = "2026-01-01T00:00:00Z";
const MARKET_PRODUCT: &str = "simulated-product";
const MARKET_ITEM: &str = "simulated-item";
/// Below this mean the Poisson sampler inverts the CDF exactly; above it, it inverts the
/// normal approximation.
const POISSON_INVERSION_LIMIT: f64 = 30.0;

/// Runs `standalone simulate`.
pub async fn run(args: SimulateArgs) -> Result<(), Error> {
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    match args.source {
        SimulateSource::Market(market) => {
            let models = parse_models(&market.models, &market.model, false)?;
            let progress = progress_bar(show_progress, "simulating");
            let results = simulate_market(&market, &models, &progress);
            progress.finish_and_clear();
            print!("{}", market_table(&results?));
        }
        SimulateSource::Log(log) => {
            let models = parse_models(&log.models, &log.model, true)?;
            let (store, key) = open_log(&log).await?;
            let progress = progress_bar(show_progress, "replaying");
            let report = replay_log(&store, &key, &models, &progress).await;
            progress.finish_and_clear();
            print!("{}", log_table(&report?));
        }
    }
    Ok(())
}

fn fail(message: impl Into<String>) -> Error {
    Error::Setup(message.into())
}

fn store_error(what: &str) -> impl FnOnce(StoreError) -> Error + '_ {
    move |e| fail(format!("{what}: {e}"))
}

fn progress_bar(visible: bool, prefix: &'static str) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{prefix} {msg:12} [{bar:32}] {pos}/{len} ({elapsed}, eta {eta})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(prefix);
    bar
}

// ---------------------------------------------------------------------------------------
// Models

/// A model to compare: its label and the model; `None` keeps each product's own model
/// (`current`, log replays only).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    pub label: String,
    pub model: Option<PricingModel>,
}

/// The named models with their default parameters: `pace` (sensitivity 0.5, curve 1.5),
/// `timeBased` (0.8 at 60 days before the main date, 1.0 at 30, 1.25 at 7, 1.5 at 0),
/// `tiers` (0.9 up to 25 % sold, 1.0 up to 50 %, 1.15 up to 75 %, then 1.3), `fixed`.
pub fn named_model(name: &str) -> Option<(&'static str, PricingModel)> {
    let step = |days_before, multiplier| TimeStep {
        days_before,
        multiplier,
    };
    let tier = |up_to_sold_percent, multiplier| Tier {
        up_to_sold_percent,
        multiplier,
    };
    Some(match name.to_ascii_lowercase().as_str() {
        "pace" => ("pace", PricingModel::default()),
        "timebased" => (
            "timeBased",
            PricingModel::TimeBased {
                steps: vec![
                    step(60.0, 0.8),
                    step(30.0, 1.0),
                    step(7.0, 1.25),
                    step(0.0, 1.5),
                ],
                max_step_change: None,
            },
        ),
        "tiers" => (
            "tiers",
            PricingModel::Tiers {
                tiers: vec![
                    tier(Some(25.0), 0.9),
                    tier(Some(50.0), 1.0),
                    tier(Some(75.0), 1.15),
                    tier(None, 1.3),
                ],
                max_step_change: None,
            },
        ),
        "fixed" => (
            "fixed",
            PricingModel::Fixed {
                max_step_change: None,
            },
        ),
        _ => return None,
    })
}

/// The models of `--models` (names) and `--model LABEL=JSON` (custom parameters, validated
/// as a product's `pricingModel` is), in that order.
pub fn parse_models(
    names: &[String],
    custom: &[String],
    allow_current: bool,
) -> Result<Vec<ModelChoice>, Error> {
    let mut choices: Vec<ModelChoice> = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let choice = if name.eq_ignore_ascii_case("current") {
            if !allow_current {
                return Err(fail(
                    "--models: `current` (each product's own model) needs a log: use `simulate log`",
                ));
            }
            ModelChoice {
                label: "current".into(),
                model: None,
            }
        } else {
            let (label, model) = named_model(name).ok_or_else(|| {
                fail(format!(
                    "--models: unknown model `{name}` (pace, timeBased, tiers, fixed{})",
                    if allow_current { ", current" } else { "" }
                ))
            })?;
            ModelChoice {
                label: label.into(),
                model: Some(model),
            }
        };
        choices.push(choice);
    }
    for spec in custom {
        let (label, model_json) = spec
            .split_once('=')
            .map(|(l, m)| (l.trim(), m.trim()))
            .filter(|(l, _)| !l.is_empty())
            .ok_or_else(|| fail(format!("--model {spec}: expected LABEL=JSON")))?;
        let value: Value = serde_json::from_str(model_json)
            .map_err(|e| fail(format!("--model {label}: not JSON: {e}")))?;
        let mut doc = Map::new();
        doc.insert("pricingModel".into(), value);
        let mut errors = Errors::default();
        let props = product_props_from_doc(&doc, "", &mut errors);
        let model = props.map(|p| p.pricing_model).ok_or_else(|| {
            fail(format!(
                "--model {label}: {}",
                errors
                    .list
                    .first()
                    .map_or("is not a valid pricing model", |e| e.message.as_str())
            ))
        })?;
        choices.push(ModelChoice {
            label: label.into(),
            model: Some(model),
        });
    }
    if choices.is_empty() {
        return Err(fail("no models to compare: give --models or --model"));
    }
    for (i, c) in choices.iter().enumerate() {
        if choices[..i].iter().any(|o| o.label == c.label) {
            return Err(fail(format!("model `{}` is listed twice", c.label)));
        }
    }
    Ok(choices)
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
}

/// A Poisson(lambda) draw from one uniform `u` in (0, 1), by inverting the CDF: exactly
/// for lambda below 30, through the normal approximation (rounded, at least 0) above.
/// One draw per sample keeps the streams of different models aligned.
pub fn poisson(lambda: f64, u: f64) -> u64 {
    if lambda.is_nan() || lambda <= 0.0 {
        return 0;
    }
    if lambda.is_infinite() {
        return u64::MAX;
    }
    if lambda < POISSON_INVERSION_LIMIT {
        let mut p = (-lambda).exp();
        let mut cdf = p;
        let mut k = 0u64;
        // The bound only matters when rounding keeps the CDF just below a `u` near 1.
        let bound = (lambda * 20.0) as u64 + 100;
        while u > cdf && k < bound {
            k += 1;
            p *= lambda / k as f64;
            cdf += p;
        }
        k
    } else {
        let x = lambda + lambda.sqrt() * inverse_normal_cdf(u);
        x.round().max(0.0) as u64
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative error below
/// 1.2e-9), for `p` in (0, 1).
pub fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.02425;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let p = p.clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON);
    if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

// ---------------------------------------------------------------------------------------
// Applying entries

/// Validates `entry` as at submission (without the clock) and applies it as the processor
/// does; errors name the entry and the first problem.
fn apply_json(
    state: &mut InstanceState,
    seq: &mut u64,
    entry: &Value,
    what: &str,
) -> Result<(), Error> {
    let mut errors = Errors::default();
    let parsed = parse_entry(entry, "", ParseOptions::default(), &mut errors).ok_or_else(|| {
        let detail = errors
            .list
            .first()
            .map(|e| format!("{} {}", e.pointer, e.message))
            .unwrap_or_default();
        fail(format!("{what}: {detail}"))
    })?;
    apply_entry(state, seq, &parsed, what)
}

fn apply_entry(
    state: &mut InstanceState,
    seq: &mut u64,
    entry: &Entry,
    what: &str,
) -> Result<(), Error> {
    *seq += 1;
    state
        .apply_logged(entry, *seq, &mut Dirty::default())
        .map_err(|r| fail(format!("{what}: {}", r.message)))
}

fn timestamp(millis: i64) -> Result<Timestamp, Error> {
    Timestamp::from_millis(millis).ok_or_else(|| fail("the simulated period is out of range"))
}

// ---------------------------------------------------------------------------------------
// Generated market

/// The outcome of one model in a generated market.
#[derive(Debug, Clone, PartialEq)]
pub struct MarketResult {
    pub label: String,
    /// Revenue in millionths.
    pub revenue_micros: i128,
    pub units: u64,
    pub capacity: u64,
    /// The last price the model set.
    pub final_price: Money,
    /// Day (from the start of the sales period) at whose step the last unit sold.
    pub sold_out_day: Option<f64>,
}

impl MarketResult {
    pub fn sell_through_percent(&self) -> f64 {
        self.units as f64 * 100.0 / self.capacity as f64
    }
}

fn check_market(args: &MarketArgs) -> Result<u64, Error> {
    if args.days == 0 || args.steps_per_day == 0 {
        return Err(fail("--days and --steps-per-day must be at least 1"));
    }
    if args.capacity == 0 {
        return Err(fail("--capacity must be at least 1"));
    }
    if !(args.base_demand.is_finite() && args.base_demand >= 0.0) {
        return Err(fail("--base-demand must be a number >= 0"));
    }
    if !args.elasticity.is_finite() {
        return Err(fail("--elasticity must be a finite number"));
    }
    if !(args.default_price.is_finite() && args.default_price > 0.0) {
        return Err(fail("--default-price must be positive"));
    }
    let steps = u64::from(args.days) * u64::from(args.steps_per_day);
    if steps > MAX_STEPS {
        return Err(fail(format!(
            "--days x --steps-per-day is {steps} steps; at most {MAX_STEPS}"
        )));
    }
    Ok(steps)
}

/// The state of a generated market for `model`: the main date at the end of the sales
/// period, one product of `capacity` (expectedSales 1) and one item with the price settings.
fn market_state(
    args: &MarketArgs,
    model: &PricingModel,
) -> Result<(InstanceState, u64, ItemId), Error> {
    let start = Timestamp::parse(MARKET_START).ok_or_else(|| fail("bad market start"))?;
    let end = timestamp(start.millis() + i64::from(args.days) * MILLIS_PER_DAY)?;
    let mut state = InstanceState::default();
    let mut seq = 0;
    apply_json(
        &mut state,
        &mut seq,
        &json!({"type": "instanceMetadata", "data": {"patch": [{
            "op": "add",
            "path": "/dates",
            "value": [{"date": {"start": end, "end": end}, "tags": ["main"],
                       "description": "simulated event"}],
        }]}}),
        "the simulated event date",
    )?;
    apply_json(
        &mut state,
        &mut seq,
        &json!({"type": "productRegistration", "data": {
            "productId": MARKET_PRODUCT,
            "capacity": args.capacity,
            "pricingModel": model,
            "expectedSales": 1,
        }}),
        "the simulated product",
    )?;
    apply_json(
        &mut state,
        &mut seq,
        &json!({"type": "itemRegistration", "data": {
            "itemId": MARKET_ITEM,
            "productId": MARKET_PRODUCT,
            "salesPeriod": {"start": start, "end": end},
            "priceSettings": {"min": args.min, "max": args.max, "default": args.default_price},
        }}),
        "the simulated item (--default-price, --min, --max)",
    )?;
    let item = ItemId::parse(MARKET_ITEM).map_err(|e| fail(e.to_string()))?;
    Ok((state, seq, item))
}

/// Runs the generated market once per model; `progress` advances by one per step.
pub fn simulate_market(
    args: &MarketArgs,
    models: &[ModelChoice],
    progress: &ProgressBar,
) -> Result<Vec<MarketResult>, Error> {
    let steps = check_market(args)?;
    progress.set_length(steps * models.len() as u64);
    models
        .iter()
        .map(|choice| {
            progress.set_message(choice.label.clone());
            let model = choice.model.as_ref().ok_or_else(|| {
                fail("`current` (each product's own model) needs a log: use `simulate log`")
            })?;
            market_run(args, steps, &choice.label, model, progress)
        })
        .collect()
}

fn market_run(
    args: &MarketArgs,
    steps: u64,
    label: &str,
    model: &PricingModel,
    progress: &ProgressBar,
) -> Result<MarketResult, Error> {
    let (mut state, mut seq, item_id) = market_state(args, model)?;
    let start = Timestamp::parse(MARKET_START).ok_or_else(|| fail("bad market start"))?;
    let total_ms = i128::from(args.days) * i128::from(MILLIS_PER_DAY);
    let per_step = args.base_demand / f64::from(args.steps_per_day);
    let mut rng = SplitMix64::new(args.seed);
    let mut previous: BTreeMap<ItemId, Money> = BTreeMap::new();
    let mut result = MarketResult {
        label: label.to_owned(),
        revenue_micros: 0,
        units: 0,
        capacity: args.capacity,
        final_price: Money::ZERO,
        sold_out_day: None,
    };
    for i in 0..steps {
        progress.inc(1);
        let offset = i64::try_from(total_ms * i128::from(i) / i128::from(steps))
            .map_err(|_| fail("the simulated period is out of range"))?;
        let now = timestamp(start.millis() + offset)?;
        let calculation = calculate(&state, true, Trigger::Schedule, now, &previous, &[]);
        let price = calculation
            .get(&item_id)
            .map(|p| p.price)
            .ok_or_else(|| fail("the engine did not price the simulated item"))?;
        previous.insert(item_id.clone(), price);
        result.final_price = price;

        let tau = i as f64 / steps as f64;
        let relative = price.to_f64() / args.default_price;
        let lambda = per_step * relative.powf(args.elasticity) * (0.5 + 1.5 * tau);
        let demand = poisson(lambda, rng.next_f64());
        let available = {
            let item = state
                .items
                .get(&item_id)
                .ok_or_else(|| fail("the simulated item is missing"))?;
            state.item_counts(item, &state.product_totals()).available
        };
        let sold = demand.min(available);
        if sold == 0 {
            continue;
        }
        let quantity = i64::try_from(sold).map_err(|_| fail("a sale is out of range"))?;
        let sale = Entry {
            transaction_id: None,
            timestamp: Some(now),
            kind: EntryKind::ItemSale(ItemSale {
                item_id: item_id.clone(),
                quantity,
                price,
                base_price: None,
                pool: false,
                currency: None,
                tax: None,
                breakdown: Vec::new(),
                sold_at: Some(now),
            }),
        };
        apply_entry(&mut state, &mut seq, &sale, "a simulated sale")?;
        result.units += sold;
        result.revenue_micros += i128::from(price.micros()) * i128::from(sold);
        if sold == available {
            result.sold_out_day = Some((i + 1) as f64 / f64::from(args.steps_per_day));
            progress.inc(steps - i - 1);
            break;
        }
    }
    Ok(result)
}

// ---------------------------------------------------------------------------------------
// Log replay

/// What a log replay found, per model and for the logged prices.
#[derive(Debug, Clone, PartialEq)]
pub struct LogReport {
    /// Log entries read.
    pub entries: u64,
    /// Entries that failed to parse or apply (as the processor rejects them).
    pub rejected: u64,
    /// instanceMetadata entries skipped: the replay keeps the current meta.
    pub metadata_skipped: u64,
    /// Applied itemSale entries.
    pub sales: u64,
    /// Revenue at the logged prices, in millionths.
    pub logged_revenue_micros: i128,
    /// Net units sold of the live items after the replay (the log's sell-through).
    pub units: u64,
    /// Sum of the products' capacities, when every product has one.
    pub capacity: Option<u64>,
    pub models: Vec<LogModelResult>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogModelResult {
    pub label: String,
    /// Sum over applied sales of quantity * the model's price, in millionths.
    pub revenue_micros: i128,
}

/// Opens the data directory's database and checks that the project and instance exist.
async fn open_log(args: &LogArgs) -> Result<(EmbeddedStore, InstanceKey), Error> {
    let path = args.data.join(DATABASE_FILE);
    if !path.is_file() {
        return Err(fail(format!(
            "no database at {}: is --data the data directory of `standalone serve`?",
            path.display()
        )));
    }
    let store = EmbeddedStore::open(&path)
        .map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
    let key = instance_key(&store, &args.project, &args.instance).await?;
    Ok((store, key))
}

/// The key of an existing instance; errors name the project or instance that is missing.
pub async fn instance_key<S: ProjectStore + InstanceStore>(
    store: &S,
    project: &str,
    instance: &str,
) -> Result<InstanceKey, Error> {
    let project_id =
        ProjectId::parse(project).map_err(|e| fail(format!("--project {project}: {e}")))?;
    let instance_id =
        InstanceId::parse(instance).map_err(|e| fail(format!("--instance {instance}: {e}")))?;
    if store
        .get_project(&project_id)
        .await
        .map_err(store_error("reading the project"))?
        .is_none()
    {
        return Err(fail(format!("project {project} not found")));
    }
    let key = InstanceKey::new(project_id, instance_id);
    if store
        .get_instance(&key)
        .await
        .map_err(store_error("reading the instance"))?
        .is_none()
    {
        return Err(fail(format!(
            "instance {instance} not found in project {project}"
        )));
    }
    Ok(key)
}

/// Prices `item` with `model` (every product switched to it; `None` keeps their own) as a
/// `request` calculation at `now`; `previous` is the model's last price list (for
/// maxStepChange) and becomes this one.
fn price_with(
    state: &mut InstanceState,
    model: Option<&PricingModel>,
    now: Timestamp,
    previous: &mut BTreeMap<ItemId, Money>,
    matches: &[PriceMatch],
    item: &ItemId,
) -> Option<Money> {
    let originals: Vec<PricingModel> = match model {
        Some(m) => state
            .products
            .values_mut()
            .map(|p| std::mem::replace(&mut p.properties.pricing_model, m.clone()))
            .collect(),
        None => Vec::new(),
    };
    let calculation = calculate(state, true, Trigger::Request, now, previous, matches);
    if model.is_some() {
        for (p, original) in state.products.values_mut().zip(originals) {
            p.properties.pricing_model = original;
        }
    }
    let price = calculation.get(item).map(|p| p.price);
    *previous = calculation
        .prices
        .into_iter()
        .map(|p| (p.item_id, p.price))
        .collect();
    price
}

/// Replays the log of `key` from its first entry, with the instance's current meta;
/// `progress` advances by one per entry.
pub async fn replay_log<S: EntryLog + PriceMatchStore + StateStore>(
    store: &S,
    key: &InstanceKey,
    models: &[ModelChoice],
    progress: &ProgressBar,
) -> Result<LogReport, Error> {
    let last = store
        .last_sequence(key)
        .await
        .map_err(store_error("reading the log"))?;
    if last == 0 {
        return Err(fail(format!(
            "instance {} of project {} has no entries in its log: nothing to replay",
            key.instance_id, key.project_id
        )));
    }
    progress.set_length(last);
    let matches = store
        .get_matches(key)
        .await
        .map_err(store_error("reading the price match rules"))?
        .rules;
    let mut state = InstanceState::default();
    state.header.meta = store
        .load_state(key)
        .await
        .map_err(store_error("reading the instance state"))?
        .header
        .meta;
    let mut dirty = Dirty::default();
    let mut previous: Vec<BTreeMap<ItemId, Money>> = vec![BTreeMap::new(); models.len()];
    let mut revenue = vec![0i128; models.len()];
    let mut report = LogReport {
        entries: 0,
        rejected: 0,
        metadata_skipped: 0,
        sales: 0,
        logged_revenue_micros: 0,
        units: 0,
        capacity: None,
        models: Vec::new(),
    };
    let mut after = 0;
    loop {
        let records = store
            .read(key, after, READ_PAGE)
            .await
            .map_err(store_error("reading the log"))?;
        let Some(tail) = records.last() else {
            break;
        };
        after = tail.sequence;
        for record in &records {
            progress.inc(1);
            report.entries += 1;
            let Some(entry) = decode(&record.jwt) else {
                // As the processor does: the entry is rejected, the sequence moves on.
                report.rejected += 1;
                state.header.applied_seq = record.sequence;
                continue;
            };
            if matches!(entry.kind, EntryKind::InstanceMetadata(_)) {
                report.metadata_skipped += 1;
                state.header.applied_seq = record.sequence;
                continue;
            }
            let sale = match &entry.kind {
                EntryKind::ItemSale(sale) if sale.quantity != 0 => Some(sale),
                _ => None,
            };
            let prices: Vec<Option<Money>> = match sale {
                Some(sale) => {
                    let now = sale
                        .sold_at
                        .or(entry.timestamp)
                        .unwrap_or(record.received_at);
                    models
                        .iter()
                        .zip(previous.iter_mut())
                        .map(|(m, prev)| {
                            price_with(
                                &mut state,
                                m.model.as_ref(),
                                now,
                                prev,
                                &matches,
                                &sale.item_id,
                            )
                        })
                        .collect()
                }
                None => Vec::new(),
            };
            let applied = state.apply_logged(&entry, record.sequence, &mut dirty);
            dirty.clear();
            if applied.is_err() {
                report.rejected += 1;
                continue;
            }
            if let Some(sale) = sale {
                let quantity = i128::from(sale.quantity);
                report.sales += 1;
                report.logged_revenue_micros += quantity * i128::from(sale.price.micros());
                for (total, price) in revenue.iter_mut().zip(&prices) {
                    if let Some(price) = price {
                        *total += quantity * i128::from(price.micros());
                    }
                }
            }
        }
    }
    let totals = state.product_totals();
    report.units = totals.values().map(|t| t.sold).sum();
    report.capacity = state
        .products
        .values()
        .map(|p| {
            let t = totals.get(&p.product_id).copied().unwrap_or_default();
            InstanceState::effective_capacity(p, &t)
        })
        .sum::<Option<u64>>()
        .filter(|_| !state.products.is_empty());
    report.models = models
        .iter()
        .zip(revenue)
        .map(|(m, revenue_micros)| LogModelResult {
            label: m.label.clone(),
            revenue_micros,
        })
        .collect();
    Ok(report)
}

/// Decodes and validates a stored entry as the processor does (`None`: it would reject it).
fn decode(jwt: &str) -> Option<Entry> {
    let payload = decode_jws_payload(jwt).ok()?;
    parse_entry(
        &payload,
        "",
        ParseOptions::default(),
        &mut Errors::default(),
    )
}

// ---------------------------------------------------------------------------------------
// Output

/// Money in millionths with two decimals, rounded half away from zero.
fn money(micros: i128) -> String {
    let cents = (micros.abs() + 5_000) / 10_000;
    let sign = if micros < 0 && cents > 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents / 100, cents % 100)
}

fn average(revenue_micros: i128, units: u64) -> String {
    if units == 0 {
        return "-".into();
    }
    money(revenue_micros / i128::from(units))
}

fn percent(value: f64) -> String {
    format!("{value:.1}%")
}

/// A plain table: the first column left-aligned, the others right-aligned.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub fn market_table(results: &[MarketResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.label.clone(),
                money(r.revenue_micros),
                r.units.to_string(),
                percent(r.sell_through_percent()),
                average(r.revenue_micros, r.units),
                money(i128::from(r.final_price.micros())),
                r.sold_out_day
                    .map_or_else(|| "-".into(), |d| format!("day {d:.1}")),
            ]
        })
        .collect();
    table(
        &[
            "model",
            "revenue",
            "units",
            "sell-through",
            "avg price",
            "final price",
            "sold out",
        ],
        &rows,
    )
}

pub fn log_table(report: &LogReport) -> String {
    let sell_through = report.capacity.filter(|c| *c > 0).map_or_else(
        || "-".into(),
        |c| percent(report.units as f64 * 100.0 / c as f64),
    );
    let versus = |revenue: i128| {
        if report.logged_revenue_micros == 0 {
            return "-".into();
        }
        let change = (revenue - report.logged_revenue_micros) as f64 * 100.0
            / report.logged_revenue_micros.abs() as f64;
        format!("{change:+.1}%")
    };
    let row = |label: &str, revenue: i128, versus: String| {
        vec![
            label.to_owned(),
            money(revenue),
            versus,
            report.units.to_string(),
            sell_through.clone(),
            average(revenue, report.units),
        ]
    };
    let mut rows = vec![row("logged", report.logged_revenue_micros, "-".into())];
    rows.extend(
        report
            .models
            .iter()
            .map(|m| row(&m.label, m.revenue_micros, versus(m.revenue_micros))),
    );
    table(
        &[
            "model",
            "revenue",
            "vs logged",
            "units",
            "sell-through",
            "avg price",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use pricing_core::jws::{Signer, StoredKey};
    use pricing_core::model::{Instance, NewEntry, Project};
    use pricing_core::process::apply_record;

    use super::*;
    use crate::cli::{Cli, Command};

    fn market(extra: &[&str]) -> MarketArgs {
        let mut argv = vec!["standalone", "simulate", "market"];
        argv.extend_from_slice(extra);
        let Command::Simulate(SimulateArgs {
            source: SimulateSource::Market(args),
            ..
        }) = Cli::try_parse_from(argv).unwrap().command
        else {
            panic!("not simulate market");
        };
        args
    }

    fn models(args: &MarketArgs) -> Vec<ModelChoice> {
        parse_models(&args.models, &args.model, false).unwrap()
    }

    fn get<'a>(results: &'a [MarketResult], label: &str) -> &'a MarketResult {
        results.iter().find(|r| r.label == label).unwrap()
    }

    #[test]
    fn splitmix_is_deterministic_and_uniform_in_the_open_interval() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..5).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..5).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        // The reference output of SplitMix64 seeded with 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut r = SplitMix64::new(1);
        let draws: Vec<f64> = (0..100_000).map(|_| r.next_f64()).collect();
        assert!(draws.iter().all(|u| *u > 0.0 && *u < 1.0));
        // Standard error 0.29 / sqrt(100000) = 0.0009.
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.004, "{mean}");
        let low = draws.iter().filter(|u| **u < 0.1).count();
        assert!((9_000..11_000).contains(&low), "{low}");
    }

    #[test]
    fn poisson_draws_have_the_right_mean_and_variance() {
        assert!((inverse_normal_cdf(0.975) - 1.959_964).abs() < 1e-5);
        assert!((inverse_normal_cdf(0.01) + 2.326_348).abs() < 1e-5);
        assert_eq!(poisson(0.0, 0.5), 0);
        assert_eq!(poisson(f64::NAN, 0.5), 0);
        for lambda in [0.3, 4.0, 29.0, 31.0, 400.0] {
            let mut r = SplitMix64::new(3);
            let n = 40_000;
            let draws: Vec<f64> = (0..n)
                .map(|_| poisson(lambda, r.next_f64()) as f64)
                .collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / n as f64;
            let tolerance = 4.0 * (lambda / n as f64).sqrt() + 0.01;
            assert!((mean - lambda).abs() < tolerance, "{lambda}: mean {mean}");
            assert!(
                (var / lambda - 1.0).abs() < 0.05,
                "{lambda}: variance {var}"
            );
        }
        // Monotone in u: a larger draw never gives less demand (common random numbers).
        for lambda in [2.0, 50.0] {
            let mut last = 0;
            for i in 1..1000 {
                let k = poisson(lambda, f64::from(i) / 1000.0);
                assert!(k >= last);
                last = k;
            }
        }
    }

    #[test]
    fn models_parse_by_name_and_as_custom_json() {
        let m = parse_models(
            &[
                "pace".into(),
                "TIMEBASED".into(),
                "tiers".into(),
                "fixed".into(),
            ],
            &[r#"gentle={"type":"pace","sensitivity":0.2}"#.into()],
            false,
        )
        .unwrap();
        let labels: Vec<&str> = m.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["pace", "timeBased", "tiers", "fixed", "gentle"]);
        assert!(matches!(
            m[4].model,
            Some(PricingModel::Pace { sensitivity, .. }) if sensitivity == 0.2
        ));
        let err = |names: &[&str], custom: &[&str], current| {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            let custom: Vec<String> = custom.iter().map(|s| s.to_string()).collect();
            parse_models(&names, &custom, current)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&["surge"], &[], false).contains("unknown model `surge`"));
        assert!(err(&["current"], &[], false).contains("needs a log"));
        assert!(err(&["fixed", "fixed"], &[], false).contains("listed twice"));
        assert!(err(&[], &[r#"x={"type":"tiers","tiers":[]}"#], false).contains("tiers needs"));
        assert!(err(&[], &["nolabel"], false).contains("LABEL=JSON"));
        assert!(err(&[], &[], false).contains("no models"));
        assert_eq!(
            parse_models(&["current".into()], &[], true).unwrap()[0].model,
            None
        );
    }

    #[test]
    fn the_cli_parses_negative_elasticities_and_defaults() {
        let args = market(&["--elasticity", "-3", "--quiet", "--seed", "9"]);
        assert_eq!(args.elasticity, -3.0);
        assert_eq!(args.seed, 9);
        assert_eq!(args.models, ["pace", "timeBased", "tiers", "fixed"]);
        assert_eq!(
            (args.capacity, args.days, args.steps_per_day),
            (1000, 60, 24)
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_market() {
        let args = market(&["--days", "20", "--steps-per-day", "12"]);
        let run = |args: &MarketArgs| {
            simulate_market(args, &models(args), &ProgressBar::hidden()).unwrap()
        };
        let first = run(&args);
        assert_eq!(first.len(), 4);
        assert_eq!(first, run(&args));
        let other = run(&market(&[
            "--days",
            "20",
            "--steps-per-day",
            "12",
            "--seed",
            "2",
        ]));
        assert_ne!(first, other);
        // A fixed price at the default is the default price throughout.
        let fixed = get(&first, "fixed");
        assert_eq!(fixed.final_price, Money::from_micros(50_000_000));
        assert_eq!(fixed.revenue_micros, i128::from(fixed.units) * 50_000_000);
    }

    #[test]
    fn with_elastic_demand_a_higher_price_sells_fewer_units() {
        let args = market(&[
            "--elasticity",
            "-3",
            "--capacity",
            "1000000",
            "--days",
            "30",
            "--model",
            r#"high={"type":"tiers","tiers":[{"multiplier":1.5}]}"#,
            "--models",
            "fixed",
        ]);
        let results = simulate_market(&args, &models(&args), &ProgressBar::hidden()).unwrap();
        let (fixed, high) = (get(&results, "fixed"), get(&results, "high"));
        assert_eq!(high.final_price, Money::from_micros(75_000_000));
        assert!(fixed.units > 0);
        assert!(
            high.units < fixed.units,
            "high {} vs fixed {}",
            high.units,
            fixed.units
        );
        // (1.5)^-3 = 0.30: far fewer, not just a few fewer.
        assert!((high.units as f64) < 0.45 * fixed.units as f64);
    }

    #[test]
    fn sales_never_exceed_capacity() {
        let args = market(&[
            "--capacity",
            "50",
            "--base-demand",
            "200",
            "--days",
            "10",
            "--min",
            "1",
        ]);
        let results = simulate_market(&args, &models(&args), &ProgressBar::hidden()).unwrap();
        for r in &results {
            assert!(r.units <= 50, "{}: {}", r.label, r.units);
        }
        let fixed = get(&results, "fixed");
        assert_eq!(fixed.units, 50);
        assert!(fixed.sold_out_day.is_some_and(|d| d < 1.0));
        assert_eq!(fixed.sell_through_percent(), 100.0);
        let out = market_table(&results);
        assert_eq!(out.lines().count(), 5);
        assert!(out.starts_with("model"));
    }

    #[test]
    fn bad_market_settings_are_named() {
        let args = market(&["--min", "60"]);
        let e = simulate_market(&args, &models(&args), &ProgressBar::hidden()).unwrap_err();
        assert!(e.to_string().contains("default"), "{e}");
        let args = market(&["--days", "0"]);
        let e = simulate_market(&args, &models(&args), &ProgressBar::hidden()).unwrap_err();
        assert!(e.to_string().contains("--days"), "{e}");
    }

    fn signer() -> Signer {
        let at = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        Signer::from_keys(&[StoredKey::generate("k1".into(), at).unwrap()]).unwrap()
    }

    fn signed(signer: &Signer, entry: Value) -> NewEntry {
        NewEntry {
            transaction_id: None,
            received_at: Timestamp::parse("2026-02-01T00:00:00Z").unwrap(),
            jwt: signer.sign_jws(&serde_json::to_vec(&entry).unwrap()),
        }
    }

    fn key() -> InstanceKey {
        InstanceKey::new(
            ProjectId::parse("p1").unwrap(),
            InstanceId::parse("i1").unwrap(),
        )
    }

    fn instance(key: &InstanceKey) -> Instance {
        let at = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        Instance {
            project_id: key.project_id.clone(),
            instance_id: key.instance_id.clone(),
            name: "I".into(),
            active: true,
            time_zone: None,
            deactivation_date: None,
            created_at: at,
            updated_at: at,
        }
    }

    fn sale(item: &str, quantity: i64, price: f64, at: &str) -> Value {
        json!({"type": "itemSale", "timestamp": at,
               "data": {"itemId": item, "quantity": quantity, "price": price}})
    }

    #[tokio::test]
    async fn a_log_replay_reproduces_the_logged_sales() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let signer = signer();
        let key = key();
        // The main date lives in the meta given at creation, not in the log.
        let meta = json!({"dates": [{"tags": ["main"],
            "date": {"start": "2026-03-01T00:00:00Z", "end": "2026-03-01T06:00:00Z"}}]});
        let header = pricing_core::state::Header {
            meta: meta.as_object().unwrap().clone(),
            ..Default::default()
        };
        store
            .create_instance(&instance(&key), &header)
            .await
            .unwrap();
        let entries = vec![
            json!({"type": "productRegistration",
                   "data": {"productId": "seats", "capacity": 100, "pricingModel": "fixed"}}),
            json!({"type": "itemRegistration", "data": {
                "itemId": "s1", "productId": "seats",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"},
                "priceSettings": {"min": 20, "max": 150, "default": 50}}}),
            sale("s1", 3, 50.0, "2026-01-10T00:00:00Z"),
            sale("s1", 2, 60.0, "2026-01-20T00:00:00Z"),
            // A return, a sale of an unknown item (rejected) and one that is not an entry.
            sale("s1", -1, 60.0, "2026-01-25T00:00:00Z"),
            sale("ghost", 5, 10.0, "2026-01-26T00:00:00Z"),
            // Skipped: the current meta is used throughout.
            json!({"type": "instanceMetadata", "data": {"patch": [
                {"op": "test", "path": "/dates", "value": []}]}}),
        ];
        let mut new: Vec<NewEntry> = entries.into_iter().map(|e| signed(&signer, e)).collect();
        new.push(NewEntry {
            jwt: "e30.bm90IGpzb24.c2ln".into(),
            ..new[0].clone()
        });
        new.push(signed(
            &signer,
            sale("s1", 10, 45.5, "2026-02-10T00:00:00Z"),
        ));
        store.append(&key, new).await.unwrap();

        let models = parse_models(
            &[
                "current".into(),
                "fixed".into(),
                "tiers".into(),
                "timeBased".into(),
            ],
            &[],
            true,
        )
        .unwrap();
        let report = replay_log(&store, &key, &models, &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(report.entries, 9);
        assert_eq!(report.rejected, 2);
        assert_eq!(report.metadata_skipped, 1);
        assert_eq!(report.sales, 4);
        assert_eq!(report.units, 14);
        assert_eq!(report.capacity, Some(100));
        // 3 * 50 + 2 * 60 - 60 + 10 * 45.5
        assert_eq!(report.logged_revenue_micros, 665_000_000);
        let revenue = |label: &str| {
            report
                .models
                .iter()
                .find(|m| m.label == label)
                .unwrap()
                .revenue_micros
        };
        // The product's own model is fixed: 14 units at the default price.
        assert_eq!(revenue("current"), 700_000_000);
        assert_eq!(revenue("fixed"), 700_000_000);
        // Under 25 % sold throughout: the first tier (0.9).
        assert_eq!(revenue("tiers"), 630_000_000);
        // 50, 40, 35 and 19 days before the main date: M 0.8667, 0.9333, 0.9667, 1.1196.
        // 3 * 43.33 + 2 * 46.67 - 48.33 + 10 * 55.98
        assert_eq!(revenue("timeBased"), 734_800_000);

        // The processor's own apply path over the same records ends with the same count.
        let mut state = InstanceState::default();
        let mut dirty = Dirty::default();
        for record in store.read(&key, 0, 100).await.unwrap() {
            let _ = apply_record(&mut state, &record, &mut dirty);
        }
        let sold: u64 = state.items.values().map(|i| i.sold).sum();
        assert_eq!(sold, report.units);

        let out = log_table(&report);
        assert!(out.lines().nth(1).unwrap().starts_with("logged"), "{out}");
        assert!(out.contains("665.00") && out.contains("+5.3%") && out.contains("14.0%"));
    }

    #[tokio::test]
    async fn missing_projects_instances_and_logs_are_named() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = key();
        let e = replay_log(&store, &key, &[], &ProgressBar::hidden())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no entries"), "{e}");

        let e = instance_key(&store, "p1", "i1").await.unwrap_err();
        assert_eq!(e.to_string(), "project p1 not found");
        let at = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let project: Project = serde_json::from_value(json!({
            "projectId": "p1", "name": "P", "createdAt": at}))
        .unwrap();
        store.create_project(&project).await.unwrap();
        let e = instance_key(&store, "p1", "i1").await.unwrap_err();
        assert_eq!(e.to_string(), "instance i1 not found in project p1");
        store
            .create_instance(&instance(&key), &Default::default())
            .await
            .unwrap();
        assert_eq!(instance_key(&store, "p1", "i1").await.unwrap(), key);
        let e = instance_key(&store, "p 1", "i1").await.unwrap_err();
        assert!(e.to_string().starts_with("--project p 1:"), "{e}");
    }
}
