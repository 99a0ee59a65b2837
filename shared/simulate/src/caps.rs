//! The bounds of a simulation requested through the API (`POST /simulations`,
//! docs/api.md "Simulations"): a request runs on the server, so its size is capped per
//! field ([`API`], tighter than a scenario file's) and in total ([`MAX_WORK`]): the Monte
//! Carlo work `runs x (pastInstances + 1) x (models x (days x slotsPerDay x items +
//! capacity) + buyers / 10)` (a price calculation per slot and item and a sale per unit
//! of every model, a draw per expected buyer of each instance: [`work`]). At the cap a
//! request takes from a fraction of a second to about 3 s of one core in a release build
//! (the `default` model's calculations cost several times the others': docs/api.md); the
//! references (the optimum's DP: capacity x 2 pieces per expected buyer, at most 1,000 x
//! 10,000) about 0.2 s.

use crate::scenario::{Bounds, FieldError, Scenario};
use crate::{ModelChoice, market, model_by_name};

/// The largest scenario the API simulates.
pub const API: Bounds = Bounds {
    max_name_chars: 128,
    max_days: 365,
    max_slots_per_day: 24,
    max_slots: 2_920,
    max_capacity: 1_000,
    max_items: 5,
    max_arrivals: 5_000.0,
    max_total_arrivals: 5_000.0,
    max_shape_points: 50,
    max_runs: 1_000,
    max_past_instances: 5,
    // Integers JSON numbers hold exactly.
    max_seed: 9_007_199_254_740_991,
    max_value: 1_000_000.0,
};

/// Most models one request compares.
pub const MAX_MODELS: usize = 6;

/// Most Monte Carlo work one request may ask for (see [`work`]).
pub const MAX_WORK: u64 = 300_000;

/// The models compared when a request names none (as `simulate market`).
pub const DEFAULT_MODELS: &[&str] = &["default", "pace", "timeBased", "tiers", "fixed"];

/// The models a request may name (exactly so written): `default` (the model of a product
/// without pricingModel), the engine's models with default parameters, `timeBased` and
/// `tiers` with the parameters of [`crate::named_model`].
pub const MODELS: &[&str] = &["default", "pace", "timeBased", "tiers", "fixed", "revenue"];

/// Most Monte Carlo work `standalone simulate` takes (see [`work`]): at the `default`
/// model's cost (about 9 us of one core a unit) some 2.5 hours of one core, spread over
/// every core. Each field's bound alone allowed years (an outside review: a million runs of
/// a small market, or 100,000 days of 50 runs, ran on silently).
pub const MAX_FILE_WORK: u64 = 1_000_000_000;

/// Why the work of simulating `s` for `models` models is over `cap`, naming its factors.
pub fn over_work(s: &Scenario, models: usize, cap: u64) -> Option<String> {
    let work = work(s, models);
    (work > cap).then(|| {
        format!(
            "the simulation's work, runs x (pastInstances + 1) x (models x (days x slotsPerDay x items + capacity) + buyers / {BUYERS_PER_UNIT}) = {} x {} x ({} x ({} x {} + {}) + {} / {BUYERS_PER_UNIT}) = {work}, is over the cap of {cap}: lower runs, pastInstances, days, slotsPerDay, capacity, the arrivals or the models",
            s.runs,
            u64::from(s.past_instances) + 1,
            models,
            s.slots,
            s.items.len(),
            s.capacity,
            buyers(s),
        )
    })
}

/// Buyers that cost about one unit of work: drawn once an instance for every model (a
/// time, an item, a willingness to pay), about 75 ns each in a release build, a tenth of
/// the cheapest model's price calculation (about 0.9 us; the `default` model's about 5).
pub const BUYERS_PER_UNIT: u64 = 10;

/// The Monte Carlo work of simulating `s` for `models` models: a unit per price
/// calculation (a slot and an item) and per unit sold, of every model and instance, and
/// per [`BUYERS_PER_UNIT`] buyers of an instance (an outside probe: a million buyers an
/// instance and a million runs were within the cap when buyers were not counted, some 8
/// hours).
pub fn work(s: &Scenario, models: usize) -> u64 {
    let per_model = s
        .slots
        .saturating_mul(s.items.len() as u64)
        .saturating_add(s.capacity);
    let per_instance = per_model
        .saturating_mul(models as u64)
        .saturating_add(buyers(s).div_ceil(BUYERS_PER_UNIT));
    u64::from(s.runs)
        .saturating_mul(u64::from(s.past_instances) + 1)
        .saturating_mul(per_instance)
}

/// The expected buyers of an instance, rounded up.
fn buyers(s: &Scenario) -> u64 {
    s.total_arrivals().max(0.0).ceil() as u64
}

/// Why a requested simulation is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The scenario is not a valid one within [`API`] (the field and what is wrong).
    Invalid(FieldError),
    /// A valid scenario whose work is over [`MAX_WORK`] (named at `runs`, the field that
    /// lowers it most simply).
    TooMuchWork(FieldError),
    /// The `models` list is wrong.
    Models(String),
}

/// A simulation the API may run.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub scenario: Scenario,
    pub models: Vec<ModelChoice>,
}

/// The models of a request by name (each once, at most [`MAX_MODELS`]); none given:
/// [`DEFAULT_MODELS`].
pub fn models(names: &[&str]) -> Result<Vec<ModelChoice>, String> {
    let names: Vec<&str> = if names.is_empty() {
        DEFAULT_MODELS.to_vec()
    } else {
        names.to_vec()
    };
    if names.len() > MAX_MODELS {
        return Err(format!(
            "names {} models; at most {MAX_MODELS}",
            names.len()
        ));
    }
    let mut choices: Vec<ModelChoice> = Vec::with_capacity(names.len());
    for name in names {
        if !MODELS.contains(&name) {
            return Err(format!("unknown model `{name}` ({})", MODELS.join(", ")));
        }
        let model = model_by_name(name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!("unknown model `{name}` (default, pace, timeBased, tiers, fixed, revenue)")
            })?;
        if choices.iter().any(|c| c.label == name) {
            return Err(format!("model `{name}` is listed twice"));
        }
        choices.push(ModelChoice {
            label: name.to_owned(),
            model: Some(model),
        });
    }
    Ok(choices)
}

/// Reads a requested simulation: the scenario document (the format of a scenario file,
/// within [`API`]) and the models' names; its work must be at most [`MAX_WORK`].
pub fn request(scenario: &serde_json::Value, model_names: &[&str]) -> Result<Request, Refusal> {
    let scenario = Scenario::from_json_within(scenario, &API).map_err(Refusal::Invalid)?;
    let models = models(model_names).map_err(Refusal::Models)?;
    if let Some(message) = over_work(&scenario, models.len(), MAX_WORK) {
        return Err(Refusal::TooMuchWork(
            FieldError::new("runs", message).with_code("tooMuchWork"),
        ));
    }
    // The product and items through the real parser and apply step, as every run builds
    // them (a refusal there names the field in its message).
    for model in models.iter().filter_map(|m| m.model.as_ref()) {
        market::instance_state(&scenario, model, scenario.context.start.millis())
            .map_err(|e| Refusal::Invalid(FieldError::new("", e.0)))?;
    }
    Ok(Request { scenario, models })
}
