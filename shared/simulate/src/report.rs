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
    /// Half-width of the 95 % confidence interval of the mean (Student's t with runs - 1
    /// degrees of freedom); `None` (JSON null) for one run, which says nothing of it.
    pub ci95: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mean {
    pub mean: f64,
}

/// Rounded to cents (amounts) or hundredths (counts, percentages).
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Mean and 95 % half-width: Student's t with n - 1 degrees of freedom (the normal's 1.96
/// understated it for a few runs: by 27 % at 5 runs, 4.5 % at 30); `None` for fewer than
/// two runs (it was 0.0 for one run, a certainty the run does not give).
pub fn estimate(values: &[f64]) -> Estimate {
    let n = values.len() as f64;
    if values.is_empty() {
        return Estimate {
            mean: 0.0,
            ci95: None,
        };
    }
    let mean = values.iter().sum::<f64>() / n;
    let ci95 = (values.len() > 1).then(|| {
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        t975(values.len() - 1) * (var / n).sqrt()
    });
    Estimate { mean, ci95 }
}

/// The 97.5 % quantile of Student's t with `df` degrees of freedom (df >= 1): exact to
/// three decimals from a table up to 30, then the Cornish-Fisher expansion in 1/df
/// (within 1e-4 of the exact value above 30; 1.96 in the limit).
pub fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    if let Some(t) = df.checked_sub(1).and_then(|i| TABLE.get(i)) {
        return *t;
    }
    let z: f64 = 1.959_963_984_540_054;
    let v = df.max(1) as f64;
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * v)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v * v * v)
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
        progress.phase("computing the optimum and the best fixed prices");
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
                            ci95: revenue.ci95.map(round2),
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
                m.revenue
                    .ci95
                    .map_or_else(|| "n/a (1 run)".to_owned(), |c| format!("±{}", money(c))),
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
