//! Market simulation (PRICING.md): the pricing models compared on a simulated market
//! against the optimal dynamic policy, the fluid bound and the best fixed prices. Pure
//! computation on the domain crate (no I/O), so that `standalone simulate` and the API's
//! `POST /simulations` (the standalone and the simulations-api function) run the same code.
//!
//! - [`scenario`]: the market scenario document, read with errors that name the field.
//! - [`market`]: buyers, instances through the real apply step and engine, past
//!   instances, the Monte Carlo runs.
//! - [`references`]: the yardsticks from the true demand: the optimal dynamic policy, the
//!   fluid bound, the best fixed prices.
//! - [`report`]: the report (`--json` of `simulate market`, the API's answer) and tables.
//! - [`caps`]: the bounds of a simulation requested through the API.

pub mod caps;
pub mod market;
pub mod references;
pub mod report;
pub mod scenario;

use pricing_core::entry::{PricingModel, Tier, TimeStep, product_props_from_doc};
use pricing_core::state::InstanceState;
use pricing_core::validate::Errors;
use serde_json::{Map, Value, json};

/// A simulation that cannot run: what failed, for a person to read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

pub(crate) fn fail(message: impl Into<String>) -> Error {
    Error(message.into())
}

/// Progress of the Monte Carlo runs (a progress bar in the CLI; nothing in the API).
pub trait Progress: Sync {
    /// The runs start: `runs` of them.
    fn set_length(&self, _runs: u64) {}
    fn inc(&self, _runs: u64) {}
    /// A phase without runs to count starts (the references, after the runs): `what` it
    /// does, for a progress display to say so rather than show the runs' bar frozen.
    fn phase(&self, _what: &str) {}
}

/// No progress shown.
pub struct NoProgress;

impl Progress for NoProgress {}

/// A model to compare: its label and the model; `None` keeps the product's own model
/// (`current`, log replays only).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    pub label: String,
    pub model: Option<PricingModel>,
}

/// The models with parameters that `--models` names: `timeBased` (0.8 at 60 days before
/// the main date, 1.0 at 30, 1.25 at 7, 1.5 at 0) and `tiers` (0.9 up to 25 % sold, 1.0 up
/// to 50 %, 1.15 up to 75 %, then 1.3). Other names are read as a product's
/// `pricingModel` is, with its default parameters (`pace`, `fixed`, ...).
pub fn named_model(name: &str) -> Option<PricingModel> {
    let step = |days_before, multiplier| TimeStep {
        days_before,
        multiplier,
    };
    let tier = |up_to_sold_percent, multiplier| Tier {
        up_to_sold_percent,
        multiplier,
    };
    Some(match name.to_ascii_lowercase().as_str() {
        "timebased" => PricingModel::TimeBased {
            steps: vec![
                step(60.0, 0.8),
                step(30.0, 1.0),
                step(7.0, 1.25),
                step(0.0, 1.5),
            ],
            max_step_change: None,
        },
        "tiers" => PricingModel::Tiers {
            tiers: vec![
                tier(Some(25.0), 0.9),
                tier(Some(50.0), 1.0),
                tier(Some(75.0), 1.15),
                tier(None, 1.3),
            ],
            max_step_change: None,
        },
        _ => return None,
    })
}

/// The model a product gets when it sets no `pricingModel`: a product registered without
/// one through the real parser and apply step.
pub fn default_model() -> Result<PricingModel, Error> {
    let mut state = InstanceState::default();
    market::apply_json(
        &mut state,
        &json!({"type": "productRegistration", "data": {"productId": "probe"}}),
        "a product without pricingModel",
    )?;
    state
        .products
        .values()
        .next()
        .map(|p| p.properties.pricing_model.clone())
        .ok_or_else(|| fail("a product without pricingModel was not registered"))
}

/// A model as a product's `pricingModel` value (a name or an object), validated by the
/// real parser.
pub fn parse_model(value: Value) -> Result<PricingModel, String> {
    let mut doc = Map::new();
    doc.insert("pricingModel".into(), value);
    let mut errors = Errors::default();
    product_props_from_doc(&doc, "", &mut errors)
        .map(|p| p.pricing_model)
        .ok_or_else(|| {
            errors
                .list
                .first()
                .map_or("is not a valid pricing model".into(), |e| {
                    // The member at fault, below the model (`tiers/0/multiplier`).
                    match e.pointer.strip_prefix("/pricingModel/") {
                        Some(member) => format!("{member} {}", e.message),
                        None => e.message.clone(),
                    }
                })
        })
}

/// The model a name stands for: `default` (a product without pricingModel), `timeBased`
/// and `tiers` with the parameters of [`named_model`], or a model name the engine knows
/// with its default parameters (`pace`, `fixed`, `revenue`). `None`: no such model.
pub fn model_by_name(name: &str) -> Result<Option<PricingModel>, Error> {
    if name.eq_ignore_ascii_case("default") {
        return default_model().map(Some);
    }
    if let Some(model) = named_model(name) {
        return Ok(Some(model));
    }
    Ok(parse_model(json!(name)).ok())
}

#[cfg(test)]
mod tests;
