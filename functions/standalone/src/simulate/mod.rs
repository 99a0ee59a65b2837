//! `standalone simulate`: compares pricing models before switching (PRICING.md).
//!
//! The market, the references and the report are the shared crate `pricing_simulate`
//! (the API's `POST /simulations` runs the same code); re-exported here:
//! - [`scenario`]: the market scenario file; [`flags`]: the scenario of the flag form.
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

pub mod flags;
pub mod log;

pub use pricing_simulate::{
    ModelChoice, default_model, market, named_model, parse_model, references, report, scenario,
};

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::Error;
use crate::cli::{MarketArgs, SimulateArgs, SimulateSource};
use report::Report;
use scenario::{Bounds, Scenario};

impl From<pricing_simulate::Error> for Error {
    fn from(e: pricing_simulate::Error) -> Self {
        Error::Setup(e.0)
    }
}

/// The CLI's progress bar as the simulation's progress.
pub(crate) struct Bar<'a>(pub &'a ProgressBar);

impl pricing_simulate::Progress for Bar<'_> {
    fn set_length(&self, runs: u64) {
        self.0.disable_steady_tick();
        self.0.set_style(runs_style());
        self.0.set_length(runs);
    }

    fn inc(&self, runs: u64) {
        self.0.inc(runs);
    }

    /// The references take from milliseconds to a minute after the runs: a spinner that
    /// says so, not the runs' bar at its end.
    fn phase(&self, what: &str) {
        let style = ProgressStyle::with_template("{prefix} {spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        self.0.set_style(style);
        let product = self.0.message();
        self.0
            .set_message(format!("{product} {what}").trim_start().to_owned());
        self.0
            .enable_steady_tick(std::time::Duration::from_millis(120));
    }
}

/// Threads of the CLI's simulations: every core.
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `standalone simulate`.
pub async fn run(args: SimulateArgs) -> Result<(), Error> {
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    match args.source {
        SimulateSource::Market(market) => {
            let scenario = market_scenario(&market)?;
            let models = parse_models(&market.models, &market.model, false)?;
            check_work(&scenario, models.len())?;
            let progress = progress_bar(show_progress, "simulating");
            let report = Report::of(&scenario, &models, all_cores(), &Bar(&progress));
            let report = report.map_err(Error::from);
            progress.finish_and_clear();
            let report = report?;
            if market.json {
                crate::write_stdout(&format!("{}\n", report.to_json()?))?;
            } else {
                crate::write_stdout(&report::market_table(&scenario, &report))?;
            }
        }
        SimulateSource::Log(args) => {
            let models = parse_models(&args.models, &args.model, true)?;
            let progress = progress_bar(show_progress, "simulating");
            let report = log::run(&args, &models, &progress).await;
            progress.finish_and_clear();
            let report = report?;
            if args.json {
                crate::write_stdout(&format!("{}\n", report.to_json()?))?;
            } else {
                crate::write_stdout(&report.table())?;
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
        None => flags::scenario_from_flags(args)?,
    };
    // The flags have the bounds a file's fields have.
    let bounds = Bounds::FILE;
    if let Some(runs) = args.runs {
        scenario.runs = check_runs(runs)?;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if let Some(past) = args.past_instances {
        if past > bounds.max_past_instances {
            return Err(fail(format!(
                "--past-instances must be from 0 to {}",
                bounds.max_past_instances
            )));
        }
        scenario.past_instances = past;
    }
    Ok(scenario)
}

/// The work of simulating `scenario` for `models` models is within
/// [`pricing_simulate::caps::MAX_FILE_WORK`].
pub(crate) fn check_work(scenario: &Scenario, models: usize) -> Result<(), Error> {
    use pricing_simulate::caps::{MAX_FILE_WORK, over_work};
    match over_work(scenario, models, MAX_FILE_WORK) {
        Some(message) => Err(fail(message)),
        None => Ok(()),
    }
}

/// `--runs` of either command: from 1 to the bound a scenario file's `runs` has.
pub(crate) fn check_runs(runs: u32) -> Result<u32, Error> {
    let max = Bounds::FILE.max_runs;
    if (1..=max).contains(&runs) {
        Ok(runs)
    } else {
        Err(fail(format!("--runs must be from 1 to {max}")))
    }
}

/// The largest scenario file read: far more than any scenario (the fields' bounds
/// allow), and a path like `/dev/zero` is refused instead of read for ever.
const MAX_SCENARIO_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a scenario file; errors name the file and the field.
pub fn read_scenario(path: &Path) -> Result<Scenario, Error> {
    use std::io::Read;
    let at = |e: String| fail(format!("scenario {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| at(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| at(e.to_string()))?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(at(format!(
            "larger than {} MiB",
            MAX_SCENARIO_BYTES / (1024 * 1024)
        )));
    }
    let text = scenario_text(&bytes).map_err(at)?;
    let value = parse_json(text).map_err(at)?;
    Scenario::from_json(&value).map_err(|e| at(e.to_string()))
}

/// A scenario file's bytes as text: UTF-8, a byte order mark at the start ignored (as RFC
/// 8259 allows; editors on Windows write one, and it was refused as "expected value at
/// line 1 column 1"); bytes that are not UTF-8 named by their place.
fn scenario_text(bytes: &[u8]) -> Result<&str, String> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = line_column(&bytes[..e.valid_up_to()]);
        format!(
            "not UTF-8: byte {:#04x} at line {line} column {column} (save the file as UTF-8)",
            bytes[e.valid_up_to()]
        )
    })
}

/// The line and column (1-based, in characters) just after `before`.
fn line_column(before: &[u8]) -> (usize, usize) {
    let text = String::from_utf8_lossy(before);
    let line = text.matches('\n').count() + 1;
    let column = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A scenario file's or a `--model` flag's JSON. A member named twice is refused: which of
/// the two did the author mean? An error quotes the text it stopped at (serde_json says
/// only the line and column: "number out of range at line 9 column 24"; the quote shows
/// which field).
fn parse_json(text: &str) -> Result<Value, String> {
    use pricing_core::document::{ParseError, parse_unique};
    parse_unique(text.as_bytes()).map_err(|e| match e {
        ParseError::Json(e) => format!("not JSON: {e}{}", near(text, e.line(), e.column())),
        ParseError::Duplicate(e) => e.to_string(),
    })
}

/// `, near `...`` : up to 40 characters of line `line` ending at `column` (1-based), the
/// text an error stopped at; empty when there is none.
fn near(text: &str, line: usize, column: usize) -> String {
    let Some(l) = line.checked_sub(1).and_then(|i| text.lines().nth(i)) else {
        return String::new();
    };
    let chars: Vec<char> = l.chars().take(column).collect();
    let from = chars.len().saturating_sub(40);
    let quoted: String = chars[from..].iter().collect();
    let quoted = quoted.trim();
    if quoted.is_empty() {
        return String::new();
    }
    format!(", near `{}`", report::printable(quoted))
}

pub(crate) fn fail(message: impl Into<String>) -> Error {
    Error::Setup(message.into())
}

/// The progress bar's style while runs are counted.
fn runs_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix} {msg:12} [{bar:32}] {pos}/{len} runs ({elapsed}, eta {eta})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
}

fn progress_bar(visible: bool, prefix: &'static str) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(runs_style());
    bar.set_prefix(prefix);
    bar
}

// ---------------------------------------------------------------------------------------
// Models

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
        let value = parse_json(model_json).map_err(|e| fail(format!("--model {label}: {e}")))?;
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
