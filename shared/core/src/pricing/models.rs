//! The per-product pricing models (DESIGN.md section 6): each yields a product multiplier
//! M and an explanation of its inputs.

use serde_json::{Map, Value};

use super::explain::{ModelExplanation, ModelNote, StepPoint};
use crate::entry::{PricingModel, Tier, TimeStep};
use crate::meta::MAIN_TAG;
use crate::time::{Period, Timestamp};

/// The `e` of the pace model: keeps the ratio finite when nothing is expected or sold.
pub const PACE_EPSILON: f64 = 0.01;

const MILLIS_PER_DAY: f64 = 86_400_000.0;

/// The main instance date: the start of the first valid `meta.dates` entry tagged `main`
/// (valid = `date.start` and `date.end` are RFC 3339 timestamps, end not before start).
pub fn main_date(meta: &Map<String, Value>) -> Option<Timestamp> {
    meta.get("dates")?.as_array()?.iter().find_map(|d| {
        let d = d.as_object()?;
        let tagged = d
            .get("tags")?
            .as_array()?
            .iter()
            .any(|t| t.as_str() == Some(MAIN_TAG));
        if !tagged {
            return None;
        }
        let date = d.get("date")?.as_object()?;
        let start = Timestamp::parse(date.get("start")?.as_str()?)?;
        let end = Timestamp::parse(date.get("end")?.as_str()?)?;
        (start <= end).then_some(start)
    })
}

/// The elapsed share of `period` at `now`, clamped to 0..1.
pub fn elapsed_share(period: &Period, now: Timestamp) -> f64 {
    let start = period.start.millis();
    let total = (period.end.millis() - start) as f64;
    if total <= 0.0 {
        return if now >= period.end { 1.0 } else { 0.0 };
    }
    ((now.millis() - start) as f64 / total).clamp(0.0, 1.0)
}

/// Days from `now` to `date` (negative once it has passed).
pub fn days_before(date: Timestamp, now: Timestamp) -> f64 {
    (date.millis() - now.millis()) as f64 / MILLIS_PER_DAY
}

/// The pace multiplier: `((actual + e) / (expected + e))^sensitivity` with
/// `expected = expected_sales * tau^curve`. Returns (M, expected).
pub fn pace(
    sensitivity: f64,
    curve: f64,
    expected_sales: f64,
    tau: f64,
    actual: f64,
) -> (f64, f64) {
    let expected = expected_sales * tau.powf(curve);
    let m = ((actual + PACE_EPSILON) / (expected + PACE_EPSILON)).powf(sensitivity);
    (m, expected)
}

/// The timeBased multiplier at `days` before the main date: piecewise linear between the
/// steps ordered by daysBefore, constant beyond both ends. `sorted` must be ordered by
/// `days_before` (see [`sorted_steps`]) and not empty. Returns M and the two steps used.
pub fn time_based(sorted: &[StepPoint], days: f64) -> Option<(f64, [StepPoint; 2])> {
    let first = *sorted.first()?;
    if days <= first.days_before {
        return Some((first.multiplier, [first, first]));
    }
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if days <= b.days_before {
            let span = b.days_before - a.days_before;
            let m = if span > 0.0 {
                a.multiplier + (b.multiplier - a.multiplier) * (days - a.days_before) / span
            } else {
                b.multiplier
            };
            return Some((m, [a, b]));
        }
    }
    let last = *sorted.last()?;
    Some((last.multiplier, [last, last]))
}

/// The steps of a timeBased model ordered by daysBefore (stable for equal days).
pub fn sorted_steps(steps: &[TimeStep]) -> Vec<StepPoint> {
    let mut sorted: Vec<StepPoint> = steps
        .iter()
        .map(|s| StepPoint {
            days_before: s.days_before,
            multiplier: s.multiplier,
        })
        .collect();
    sorted.sort_by(|a, b| a.days_before.total_cmp(&b.days_before));
    sorted
}

/// The tier for `sold_percent`: the first in list order whose upToSoldPercent is at least
/// the sold percent, a tier without upToSoldPercent matching anything. When none matches,
/// the last tier (flagged `true`). `None` for an empty list.
pub fn tier(tiers: &[Tier], sold_percent: f64) -> Option<(usize, &Tier, bool)> {
    match tiers
        .iter()
        .position(|t| t.up_to_sold_percent.is_none_or(|u| u >= sold_percent))
    {
        Some(i) => Some((i, &tiers[i], false)),
        None => tiers.last().map(|t| (tiers.len() - 1, t, true)),
    }
}

/// What a model needs to know about the product and the instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProductInputs {
    pub expected_sales: f64,
    /// Units sold of the product's live items.
    pub sold: u64,
    /// The effective capacity (the product's, else the sum of legacy item quantities).
    pub capacity: Option<u64>,
    /// See [`main_date`].
    pub main_date: Option<Timestamp>,
}

/// The share sold as a fraction, or why there is none.
fn share_sold(sold: u64, capacity: Option<u64>) -> Result<f64, ModelNote> {
    match capacity {
        None => Err(ModelNote::NoCapacity),
        Some(0) => Err(ModelNote::ZeroCapacity),
        Some(c) => Ok(sold as f64 / c as f64),
    }
}

/// The part of a product's model that does not depend on the item, computed once per
/// product and calculation.
#[derive(Debug, Clone)]
pub(crate) enum Prepared {
    Pace {
        sensitivity: f64,
        curve: f64,
        expected_sales: f64,
        sold: u64,
        capacity: Option<u64>,
        actual: Result<f64, ModelNote>,
    },
    /// timeBased, tiers and fixed do not depend on the item.
    Constant {
        m: f64,
        explanation: ModelExplanation,
    },
    /// The revenue model: the engine solves the product's items together and prices each
    /// by its own plan (`revenue::ItemPlan`).
    Revenue,
}

impl Prepared {
    pub(crate) fn new(model: &PricingModel, inputs: &ProductInputs, now: Timestamp) -> Self {
        match model {
            PricingModel::Pace {
                sensitivity, curve, ..
            } => Prepared::Pace {
                sensitivity: *sensitivity,
                curve: *curve,
                expected_sales: inputs.expected_sales,
                sold: inputs.sold,
                capacity: inputs.capacity,
                actual: share_sold(inputs.sold, inputs.capacity),
            },
            PricingModel::TimeBased { steps, .. } => {
                let (m, explanation) = time_based_explained(steps, inputs.main_date, now);
                Prepared::Constant { m, explanation }
            }
            PricingModel::Tiers { tiers, .. } => {
                let (m, explanation) = tiers_explained(tiers, inputs.sold, inputs.capacity);
                Prepared::Constant { m, explanation }
            }
            PricingModel::Fixed { .. } => Prepared::Constant {
                m: 1.0,
                explanation: ModelExplanation::Fixed { note: None },
            },
            // The revenue model needs the instance, not one product's inputs: the engine
            // prepares it (`ProductPlan`). Alone, it prices at the default.
            PricingModel::Revenue { .. } => Prepared::Constant {
                m: 1.0,
                explanation: ModelExplanation::Revenue(Box::default()),
            },
        }
    }

    /// M for an item with this sales period.
    pub(crate) fn multiplier(
        &self,
        sales_period: &Period,
        now: Timestamp,
    ) -> (f64, ModelExplanation) {
        match self {
            Prepared::Pace {
                sensitivity,
                curve,
                expected_sales,
                sold,
                capacity,
                actual,
            } => {
                let tau = elapsed_share(sales_period, now);
                let expected = expected_sales * tau.powf(*curve);
                let (m, actual, note) = match actual {
                    Ok(a) => {
                        // The formula of [`pace`], with `expected` computed once.
                        let m = ((a + PACE_EPSILON) / (expected + PACE_EPSILON)).powf(*sensitivity);
                        (m, Some(*a), None)
                    }
                    Err(note) => (1.0, None, Some(*note)),
                };
                (
                    m,
                    ModelExplanation::Pace {
                        sensitivity: *sensitivity,
                        curve: *curve,
                        expected_sales: *expected_sales,
                        tau,
                        expected,
                        sold: *sold,
                        capacity: *capacity,
                        actual,
                        note,
                    },
                )
            }
            Prepared::Constant { m, explanation } => (*m, explanation.clone()),
            // Each item has its own plan (`revenue::ItemPlan`); without one, the default.
            Prepared::Revenue => (1.0, ModelExplanation::Revenue(Box::default())),
        }
    }
}

fn time_based_explained(
    steps: &[TimeStep],
    main: Option<Timestamp>,
    now: Timestamp,
) -> (f64, ModelExplanation) {
    let Some(main) = main else {
        return (
            1.0,
            ModelExplanation::TimeBased {
                main_date: None,
                days_before: None,
                between: None,
                note: Some(ModelNote::NoMainDate),
            },
        );
    };
    let days = days_before(main, now);
    match time_based(&sorted_steps(steps), days) {
        Some((m, between)) => (
            m,
            ModelExplanation::TimeBased {
                main_date: Some(main),
                days_before: Some(days),
                between: Some(between),
                note: None,
            },
        ),
        None => (
            1.0,
            ModelExplanation::TimeBased {
                main_date: Some(main),
                days_before: Some(days),
                between: None,
                note: Some(ModelNote::EmptyModel),
            },
        ),
    }
}

fn tiers_explained(tiers: &[Tier], sold: u64, capacity: Option<u64>) -> (f64, ModelExplanation) {
    let explained =
        |sold_percent, chosen: Option<(usize, &Tier, bool)>, note| ModelExplanation::Tiers {
            sold,
            capacity,
            sold_percent,
            tier: chosen.map(|(i, _, _)| i),
            up_to_sold_percent: chosen.and_then(|(_, t, _)| t.up_to_sold_percent),
            note,
        };
    let share = match share_sold(sold, capacity) {
        Ok(s) => s,
        Err(note) => return (1.0, explained(None, None, Some(note))),
    };
    let percent = share * 100.0;
    match tier(tiers, percent) {
        Some(chosen @ (_, t, beyond)) => (
            t.multiplier,
            explained(
                Some(percent),
                Some(chosen),
                beyond.then_some(ModelNote::BeyondLastTier),
            ),
        ),
        None => (
            1.0,
            explained(Some(percent), None, Some(ModelNote::EmptyModel)),
        ),
    }
}

/// M and its explanation for one item of a product with `model`: the whole model step
/// for a single item (the engine prepares per product and calls the same code).
pub fn product_multiplier(
    model: &PricingModel,
    inputs: &ProductInputs,
    sales_period: &Period,
    now: Timestamp,
) -> (f64, ModelExplanation) {
    Prepared::new(model, inputs, now).multiplier(sales_period, now)
}

/// The `maxStepChange` of any model.
pub fn max_step_change(model: &PricingModel) -> Option<f64> {
    match model {
        PricingModel::Pace {
            max_step_change, ..
        }
        | PricingModel::TimeBased {
            max_step_change, ..
        }
        | PricingModel::Tiers {
            max_step_change, ..
        }
        | PricingModel::Fixed { max_step_change }
        | PricingModel::Revenue { max_step_change } => *max_step_change,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn period(a: &str, b: &str) -> Period {
        Period::new(ts(a), ts(b)).unwrap()
    }

    fn pace_model() -> PricingModel {
        PricingModel::pace()
    }

    fn inputs(sold: u64, capacity: Option<u64>) -> ProductInputs {
        ProductInputs {
            expected_sales: 1.0,
            sold,
            capacity,
            main_date: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn pace_follows_the_formula() {
        let p = period("2026-01-01T00:00:00Z", "2026-01-11T00:00:00Z");
        let now = ts("2026-01-06T00:00:00Z"); // tau = 0.5
        let (m, ex) = product_multiplier(&pace_model(), &inputs(10, Some(100)), &p, now);
        let expected = 0.5f64.powf(1.5);
        let want = ((0.1 + 0.01) / (expected + 0.01)).powf(0.5);
        assert!(close(m, want), "{m} vs {want}");
        let ModelExplanation::Pace {
            tau,
            expected: e,
            actual,
            sold,
            capacity,
            note,
            ..
        } = ex
        else {
            panic!("pace")
        };
        assert!(close(tau, 0.5));
        assert!(close(e, expected));
        assert_eq!(
            (actual, sold, capacity, note),
            (Some(0.1), 10, Some(100), None)
        );
        // Selling exactly on pace gives M = 1; ahead of pace raises, behind lowers.
        let (m, _) = pace(0.5, 1.5, 1.0, 0.5, expected);
        assert!(close(m, 1.0));
        assert!(pace(0.5, 1.5, 1.0, 0.5, 0.6).0 > 1.0);
        assert!(pace(0.5, 1.5, 1.0, 0.5, 0.1).0 < 1.0);
        // Before the sales period nothing is expected: tau clamps to 0.
        let (m, ex) = product_multiplier(
            &pace_model(),
            &inputs(0, Some(100)),
            &p,
            ts("2025-12-01T00:00:00Z"),
        );
        assert!(close(m, 1.0));
        assert!(matches!(ex, ModelExplanation::Pace { tau, .. } if tau == 0.0));
        // After it, tau clamps to 1.
        let (_, ex) = product_multiplier(
            &pace_model(),
            &inputs(0, Some(100)),
            &p,
            ts("2027-01-01T00:00:00Z"),
        );
        assert!(matches!(ex, ModelExplanation::Pace { tau, .. } if tau == 1.0));
        // Sensitivity and curve are taken from the model.
        let model = PricingModel::Pace {
            sensitivity: 1.0,
            curve: 1.0,
            max_step_change: None,
        };
        let (m, _) = product_multiplier(&model, &inputs(50, Some(100)), &p, now);
        assert!(close(m, (0.51 / 0.51f64).powf(1.0)));
    }

    #[test]
    fn pace_without_capacity_is_neutral_and_says_why() {
        let p = period("2026-01-01T00:00:00Z", "2026-01-11T00:00:00Z");
        let now = ts("2026-01-06T00:00:00Z");
        let (m, ex) = product_multiplier(&pace_model(), &inputs(10, None), &p, now);
        assert_eq!(m, 1.0);
        assert!(matches!(
            ex,
            ModelExplanation::Pace {
                note: Some(ModelNote::NoCapacity),
                actual: None,
                ..
            }
        ));
        let (m, ex) = product_multiplier(&pace_model(), &inputs(10, Some(0)), &p, now);
        assert_eq!(m, 1.0);
        assert!(matches!(
            ex,
            ModelExplanation::Pace {
                note: Some(ModelNote::ZeroCapacity),
                ..
            }
        ));
    }

    fn steps(list: &[(f64, f64)]) -> PricingModel {
        PricingModel::TimeBased {
            steps: list
                .iter()
                .map(|&(d, m)| TimeStep {
                    days_before: d,
                    multiplier: m,
                })
                .collect(),
            max_step_change: None,
        }
    }

    #[test]
    fn time_based_interpolates_and_is_constant_beyond_the_ends() {
        // Given out of order on purpose.
        let model = steps(&[(0.0, 2.0), (30.0, 1.0), (10.0, 1.5)]);
        let main = ts("2026-06-01T00:00:00Z");
        let p = period("2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z");
        let at = |now: &str| {
            let i = ProductInputs {
                main_date: Some(main),
                ..inputs(0, Some(10))
            };
            product_multiplier(&model, &i, &p, ts(now))
        };
        // 20 days before: halfway between 30 (1.0) and 10 (1.5).
        let (m, ex) = at("2026-05-12T00:00:00Z");
        assert!(close(m, 1.25));
        let ModelExplanation::TimeBased {
            days_before,
            between,
            main_date,
            note,
        } = ex
        else {
            panic!("timeBased")
        };
        assert!(close(days_before.unwrap(), 20.0));
        assert_eq!(main_date, Some(main));
        assert_eq!(note, None);
        let [a, b] = between.unwrap();
        assert_eq!((a.days_before, b.days_before), (10.0, 30.0));
        // 5 days before: between 0 (2.0) and 10 (1.5).
        assert!(close(at("2026-05-27T00:00:00Z").0, 1.75));
        // Exactly on a step.
        assert!(close(at("2026-05-22T00:00:00Z").0, 1.5));
        // Far before: constant at the largest daysBefore.
        assert!(close(at("2026-01-02T00:00:00Z").0, 1.0));
        // After the main date (negative days): constant at the smallest daysBefore.
        assert!(close(at("2026-06-03T00:00:00Z").0, 2.0));
        // Hours count: 12 hours before is 0.5 days.
        assert!(close(at("2026-05-31T12:00:00Z").0, 2.0 - 0.5 * 0.05));
    }

    #[test]
    fn time_based_without_main_date_is_neutral() {
        let model = steps(&[(0.0, 2.0)]);
        let p = period("2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z");
        let (m, ex) = product_multiplier(&model, &inputs(0, None), &p, ts("2026-02-01T00:00:00Z"));
        assert_eq!(m, 1.0);
        assert!(matches!(
            ex,
            ModelExplanation::TimeBased {
                note: Some(ModelNote::NoMainDate),
                ..
            }
        ));
    }

    #[test]
    fn the_main_date_is_the_first_valid_one_tagged_main() {
        let meta = json!({"dates": [
            {"date": {"start": "2026-03-01T00:00:00Z", "end": "2026-03-02T00:00:00Z"}, "tags": []},
            {"date": {"start": "2026-04-02T00:00:00Z", "end": "2026-04-01T00:00:00Z"}, "tags": ["main"]},
            {"date": {"start": "not a date", "end": "2026-04-01T00:00:00Z"}, "tags": ["main"]},
            {"date": {"start": "2026-05-01T18:00:00Z", "end": "2026-05-01T18:00:00Z"}, "tags": ["main", "main"]},
            {"date": {"start": "2026-06-01T00:00:00Z", "end": "2026-06-02T00:00:00Z"}, "tags": ["main"]}
        ]});
        let meta = meta.as_object().unwrap().clone();
        assert_eq!(main_date(&meta), Some(ts("2026-05-01T18:00:00Z")));
        assert_eq!(main_date(&Map::new()), None);
        let none = json!({"dates": [{"date": {"start": "2026-03-01T00:00:00Z", "end": "2026-03-02T00:00:00Z"}}]});
        assert_eq!(main_date(none.as_object().unwrap()), None);
    }

    fn tiers(list: &[(Option<f64>, f64)]) -> PricingModel {
        PricingModel::Tiers {
            tiers: list
                .iter()
                .map(|&(u, m)| Tier {
                    up_to_sold_percent: u,
                    multiplier: m,
                })
                .collect(),
            max_step_change: None,
        }
    }

    #[test]
    fn tiers_take_the_first_tier_at_or_above_the_share_sold() {
        let model = tiers(&[(Some(20.0), 0.8), (Some(50.0), 1.0), (None, 1.3)]);
        let p = period("2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z");
        let now = ts("2026-02-01T00:00:00Z");
        let at = |sold| product_multiplier(&model, &inputs(sold, Some(200)), &p, now);
        assert_eq!(at(0).0, 0.8);
        assert_eq!(at(40).0, 0.8); // exactly 20 %
        assert_eq!(at(41).0, 1.0);
        assert_eq!(at(100).0, 1.0); // exactly 50 %
        let (m, ex) = at(101);
        assert_eq!(m, 1.3);
        assert_eq!(
            ex,
            ModelExplanation::Tiers {
                sold: 101,
                capacity: Some(200),
                sold_percent: Some(50.5),
                tier: Some(2),
                up_to_sold_percent: None,
                note: None
            }
        );
        // Oversold still takes the catch-all.
        assert_eq!(at(500).0, 1.3);
    }

    #[test]
    fn tiers_beyond_the_last_without_catch_all_use_the_last_and_say_so() {
        let model = tiers(&[(Some(20.0), 0.8), (Some(50.0), 1.1)]);
        let p = period("2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z");
        let now = ts("2026-02-01T00:00:00Z");
        let (m, ex) = product_multiplier(&model, &inputs(90, Some(100)), &p, now);
        assert_eq!(m, 1.1);
        assert!(matches!(
            ex,
            ModelExplanation::Tiers {
                tier: Some(1),
                note: Some(ModelNote::BeyondLastTier),
                ..
            }
        ));
        // Without a capacity: neutral.
        let (m, ex) = product_multiplier(&model, &inputs(90, None), &p, now);
        assert_eq!(m, 1.0);
        assert!(matches!(
            ex,
            ModelExplanation::Tiers {
                note: Some(ModelNote::NoCapacity),
                tier: None,
                ..
            }
        ));
    }

    #[test]
    fn fixed_is_one() {
        let p = period("2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z");
        let model = PricingModel::Fixed {
            max_step_change: Some(0.1),
        };
        let (m, ex) =
            product_multiplier(&model, &inputs(3, Some(4)), &p, ts("2026-02-01T00:00:00Z"));
        assert_eq!((m, ex), (1.0, ModelExplanation::Fixed { note: None }));
        assert_eq!(max_step_change(&model), Some(0.1));
    }

    #[test]
    fn explanations_serialize_in_camel_case() {
        let ex = ModelExplanation::Pace {
            sensitivity: 0.5,
            curve: 1.5,
            expected_sales: 0.8,
            tau: 0.25,
            expected: 0.1,
            sold: 5,
            capacity: None,
            actual: None,
            note: Some(ModelNote::NoCapacity),
        };
        let v = serde_json::to_value(&ex).unwrap();
        assert_eq!(
            v,
            json!({"type": "pace", "sensitivity": 0.5, "curve": 1.5, "expectedSales": 0.8,
                   "tau": 0.25, "expected": 0.1, "sold": 5, "note": "noCapacity"})
        );
        let back: ModelExplanation = serde_json::from_value(v).unwrap();
        assert_eq!(back, ex);
    }
}
