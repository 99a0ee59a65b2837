//! `standalone simulate`: compares pricing models before switching (PRICING.md).
//!
//! - [`scenario`]: the market scenario file (and the scenario of the flag form).
//! - [`market`]: buyers, instances through the real apply step and engine
//!   ([`market::price_slot`]), past instances, the Monte Carlo runs.
//! - [`references`]: the yardsticks from the true demand: the optimal dynamic policy, the
//!   fluid bound, the best fixed prices.
//! - [`log`]: `simulate log`, a counterfactual: demand fitted to a logged instance, then
//!   every model simulated against it in the same market.
//! - [`report`]: the `--json` document and the tables.
//!
//! Output goes to stdout; a progress bar to stderr unless stderr is not a terminal or
//! `--quiet` is given.

pub mod log;
pub mod market;
pub mod references;
pub mod report;
pub mod scenario;

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use pricing_core::entry::{PricingModel, Tier, TimeStep, product_props_from_doc};
use pricing_core::state::InstanceState;
use pricing_core::validate::Errors;
use serde_json::{Map, Value, json};

use crate::Error;
use crate::cli::{MarketArgs, SimulateArgs, SimulateSource};
use report::Report;
use scenario::Scenario;

/// Runs `standalone simulate`.
pub async fn run(args: SimulateArgs) -> Result<(), Error> {
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    match args.source {
        SimulateSource::Market(market) => {
            let scenario = market_scenario(&market)?;
            let models = parse_models(&market.models, &market.model, false)?;
            let progress = progress_bar(show_progress, "simulating");
            let report = Report::of(&scenario, &models, &progress);
            progress.finish_and_clear();
            let report = report?;
            if market.json {
                println!("{}", report.to_json()?);
            } else {
                print!("{}", report::market_table(&scenario, &report));
            }
        }
        SimulateSource::Log(args) => {
            let models = parse_models(&args.models, &args.model, true)?;
            let progress = progress_bar(show_progress, "simulating");
            let report = log::run(&args, &models, &progress).await;
            progress.finish_and_clear();
            let report = report?;
            if args.json {
                println!("{}", report.to_json()?);
            } else {
                print!("{}", report.table());
            }
        }
    }
    Ok(())
}

/// The scenario of `simulate market`: the file of `--scenario`, else built from the flags;
/// `--runs`, `--seed` and `--past-instances` override either.
pub fn market_scenario(args: &MarketArgs) -> Result<Scenario, Error> {
    let mut scenario = match &args.scenario {
        Some(path) => read_scenario(path)?,
        None => Scenario::from_flags(args)?,
    };
    if let Some(runs) = args.runs {
        if runs == 0 {
            return Err(fail("--runs must be at least 1"));
        }
        scenario.runs = runs;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if let Some(past) = args.past_instances {
        scenario.past_instances = past;
    }
    Ok(scenario)
}

/// Reads a scenario file; errors name the file and the field.
pub fn read_scenario(path: &Path) -> Result<Scenario, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(format!("scenario {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| fail(format!("scenario {}: not JSON: {e}", path.display())))?;
    Scenario::from_json(&value).map_err(|e| fail(format!("scenario {}: {e}", path.display())))
}

pub(crate) fn fail(message: impl Into<String>) -> Error {
    Error::Setup(message.into())
}

fn progress_bar(visible: bool, prefix: &'static str) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{prefix} {msg:12} [{bar:32}] {pos}/{len} runs ({elapsed}, eta {eta})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(prefix);
    bar
}

// ---------------------------------------------------------------------------------------
// Models

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
fn parse_model(value: Value) -> Result<PricingModel, String> {
    let mut doc = Map::new();
    doc.insert("pricingModel".into(), value);
    let mut errors = Errors::default();
    product_props_from_doc(&doc, "", &mut errors)
        .map(|p| p.pricing_model)
        .ok_or_else(|| {
            errors
                .list
                .first()
                .map_or("is not a valid pricing model".into(), |e| e.message.clone())
        })
}

/// The models of `--models` (names, labelled as given) and `--model LABEL=JSON` (custom
/// parameters, validated as a product's `pricingModel` is), in that order.
pub fn parse_models(
    names: &[String],
    custom: &[String],
    allow_current: bool,
) -> Result<Vec<ModelChoice>, Error> {
    let mut choices: Vec<ModelChoice> = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let model = if name.eq_ignore_ascii_case("current") {
            if !allow_current {
                return Err(fail(
                    "--models: `current` (each product's own model) needs a log: use `simulate log`",
                ));
            }
            None
        } else if name.eq_ignore_ascii_case("default") {
            Some(default_model()?)
        } else if let Some(model) = named_model(name) {
            Some(model)
        } else {
            Some(parse_model(json!(name)).map_err(|_| {
                fail(format!(
                    "--models: unknown model `{name}` (default, pace, timeBased, tiers, fixed{}, or another model name the engine knows)",
                    if allow_current { ", current" } else { "" }
                ))
            })?)
        };
        choices.push(ModelChoice {
            label: name.to_owned(),
            model,
        });
    }
    for spec in custom {
        let (label, model_json) = spec
            .split_once('=')
            .map(|(l, m)| (l.trim(), m.trim()))
            .filter(|(l, _)| !l.is_empty())
            .ok_or_else(|| fail(format!("--model {spec}: expected LABEL=JSON")))?;
        let value: Value = serde_json::from_str(model_json)
            .map_err(|e| fail(format!("--model {label}: not JSON: {e}")))?;
        let model = parse_model(value).map_err(|e| fail(format!("--model {label}: {e}")))?;
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

#[cfg(test)]
mod tests;
