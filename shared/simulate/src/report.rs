//! What `simulate market` reports: the `--json` document of PRICING.md ("Output") and a
//! readable table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::market::{Sample, simulate};
use crate::references::{References, references};
use crate::scenario::Scenario;
use crate::{Error, ModelChoice, Progress, fail};

/// The `--json` document: exactly the keys of PRICING.md.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub scenario: String,
    pub runs: u32,
    pub optimal: Optimal,
    pub fluid_bound: f64,
    pub best_fixed: BestFixed,
    pub models: Vec<ModelReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Optimal {
    pub revenue: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestFixed {
    pub prices: BTreeMap<String, f64>,
    pub revenue: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelReport {
    pub label: String,
    pub revenue: Estimate,
    pub sold: Mean,
    pub percent_of_optimal: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    /// Half-width of the 95 % confidence interval of the mean.
    pub ci95: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mean {
    pub mean: f64,
}

/// Rounded to cents (amounts) or hundredths (counts, percentages).
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Mean and 95 % half-width (normal approximation; 0 for one run).
pub fn estimate(values: &[f64]) -> Estimate {
    let n = values.len() as f64;
    if values.is_empty() {
        return Estimate {
            mean: 0.0,
            ci95: 0.0,
        };
    }
    let mean = values.iter().sum::<f64>() / n;
    let ci95 = if values.len() > 1 {
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        1.96 * (var / n).sqrt()
    } else {
        0.0
    };
    Estimate { mean, ci95 }
}

fn percent_of(value: f64, optimum: f64) -> f64 {
    if optimum > 0.0 {
        value * 100.0 / optimum
    } else {
        100.0
    }
}

impl Report {
    /// Simulates every model (on `threads` threads) and computes the references of `s`.
    pub fn of(
        s: &Scenario,
        models: &[ModelChoice],
        threads: usize,
        progress: &dyn Progress,
    ) -> Result<Self, Error> {
        let samples = simulate(s, models, threads, progress)?;
        Ok(Self::from_parts(s, models, &samples, &references(s)))
    }

    pub fn from_parts(
        s: &Scenario,
        models: &[ModelChoice],
        samples: &[Sample],
        refs: &References,
    ) -> Self {
        Report {
            scenario: s.name.clone(),
            runs: s.runs,
            optimal: Optimal {
                revenue: round2(refs.optimal),
            },
            fluid_bound: round2(refs.fluid_bound),
            best_fixed: BestFixed {
                prices: s
                    .items
                    .iter()
                    .zip(&refs.best_fixed_prices)
                    .map(|(i, p)| (i.item_id.to_string(), round2(*p)))
                    .collect(),
                revenue: round2(refs.best_fixed),
            },
            models: models
                .iter()
                .zip(samples)
                .map(|(m, sample)| {
                    let revenue = estimate(&sample.revenue);
                    ModelReport {
                        label: m.label.clone(),
                        percent_of_optimal: round2(percent_of(revenue.mean, refs.optimal)),
                        revenue: Estimate {
                            mean: round2(revenue.mean),
                            ci95: round2(revenue.ci95),
                        },
                        sold: Mean {
                            mean: round2(estimate(&sample.units).mean),
                        },
                    }
                })
                .collect(),
        }
    }

    pub fn to_json(&self) -> Result<String, Error> {
        serde_json::to_string_pretty(self).map_err(|e| fail(format!("the report: {e}")))
    }
}

/// Amounts with two decimals.
pub fn money(x: f64) -> String {
    format!("{x:.2}")
}

/// A plain table: the first column left-aligned, the others right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
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

/// The market in one line.
pub fn describe(s: &Scenario) -> String {
    format!(
        "{:.4} days, {:.4} slots a day, capacity {}, {} item{}, {:.1} buyers expected; {} runs, {} past instance{} before the scored one",
        s.days(),
        s.slots_per_day(),
        s.capacity,
        s.items.len(),
        if s.items.len() == 1 { "" } else { "s" },
        s.total_arrivals(),
        s.runs,
        s.past_instances,
        if s.past_instances == 1 { "" } else { "s" },
    )
    .replace(".0000 ", " ")
}

/// The readable form of a report.
pub fn market_table(s: &Scenario, r: &Report) -> String {
    let optimum = r.optimal.revenue;
    let fixed_prices = r
        .best_fixed
        .prices
        .iter()
        .map(|(item, p)| format!("{item} {}", money(*p)))
        .collect::<Vec<_>>()
        .join(", ");
    let pct = |v: f64| format!("{:.1}", percent_of(v, optimum));
    let refs = table(
        &["reference", "revenue", "% of optimal"],
        &[
            vec![
                "optimal dynamic policy".into(),
                money(optimum),
                pct(optimum),
            ],
            vec![
                "fluid bound".into(),
                money(r.fluid_bound),
                pct(r.fluid_bound),
            ],
            vec![
                format!("best fixed ({fixed_prices})"),
                money(r.best_fixed.revenue),
                pct(r.best_fixed.revenue),
            ],
        ],
    );
    let rows: Vec<Vec<String>> = r
        .models
        .iter()
        .map(|m| {
            vec![
                m.label.clone(),
                money(m.revenue.mean),
                format!("±{}", money(m.revenue.ci95)),
                format!("{:.1}", m.sold.mean),
                format!("{:.1}", m.percent_of_optimal),
            ]
        })
        .collect();
    let models = table(
        &["model", "revenue", "95 % CI", "units", "% of optimal"],
        &rows,
    );
    format!(
        "scenario {}: {}\n\n{refs}\n{models}",
        printable(&r.scenario),
        describe(s)
    )
}

/// `text` with its control characters escaped (`\u{1b}`): a scenario's name is the
/// author's text, and printed raw an escape sequence in it drives the terminal (an
/// outside review's `\u{1b}[2J` cleared it). The JSON form escapes them anyway.
pub fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}
