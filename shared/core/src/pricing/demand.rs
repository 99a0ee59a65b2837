//! What the `revenue` model learns about demand, and how (pure, no I/O).
//!
//! Demand for an item is a Poisson stream of buyers whose rate over the elapsed share
//! `tau` of its sales period is `A * g(tau) * exp(-b * (p - d))`: `A` the units the item
//! would sell over the whole period at its default price `d`, `g` the booking curve (a
//! density over `tau`, shared by the items of a product and learned across the project's
//! instances), `b` the item's price response.
//!
//! Sufficient statistics are kept as things happen, never by re-reading the log:
//! - [`SalesStats`] in the item state, updated by the apply step for every `itemSale`:
//!   units bought, the prices paid, and units per tenth of the sales period (for the
//!   curve). Returns are not demand: they free a unit but do not undo a purchase decision.
//! - [`Exposure`] with the item's price, carried from one calculation to the next: how
//!   much of the booking curve passed at each price.
//!
//! [`fit`] is a maximum a posteriori Poisson regression of (A, b) on those statistics,
//! with priors from what the user said (expectedSales, capacity, the default price).

use serde::{Deserialize, Serialize};

/// Bins of the booking curve over the sales period.
pub const CURVE_BINS: usize = 20;
/// Price levels kept in an [`Exposure`] (the closest two are merged beyond it).
const EXPOSURE_LEVELS: usize = 12;

/// The sales of an item as demand sees them (kept by the apply step).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SalesStats {
    /// Units bought (returns are not subtracted).
    pub units: u64,
    /// Sum of units * price paid.
    pub paid: f64,
    /// Units bought per bin of the elapsed share of the sales period.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bins: Vec<u64>,
    /// Sum of units * (price paid / default price) per bin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relative: Vec<f64>,
}

impl SalesStats {
    pub fn is_empty(&self) -> bool {
        self.units == 0
    }

    /// Records `units` bought at `price` at elapsed share `tau` (when the sale has a
    /// time), with the item's default price `default` at the time. Order does not matter:
    /// late or out-of-order sales land in their own bin.
    pub fn record(&mut self, units: u64, price: f64, tau: Option<f64>, default: f64) {
        if units == 0 || !price.is_finite() || price < 0.0 {
            return;
        }
        self.units = self.units.saturating_add(units);
        self.paid += units as f64 * price;
        let Some(tau) = tau else {
            return;
        };
        if self.bins.len() != CURVE_BINS {
            self.bins = vec![0; CURVE_BINS];
            self.relative = vec![0.0; CURVE_BINS];
        }
        let bin = bin_of(tau);
        self.bins[bin] = self.bins[bin].saturating_add(units);
        let relative = if default > 0.0 { price / default } else { 1.0 };
        self.relative[bin] += units as f64 * relative;
    }
}

fn bin_of(tau: f64) -> usize {
    let tau = if tau.is_finite() {
        tau.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((tau * CURVE_BINS as f64) as usize).min(CURVE_BINS - 1)
}

/// The sales of a product's items as the booking-curve learner reads them in the
/// project's later instances (kept by the apply step on the product record).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProductSales {
    /// Units bought per bin of the elapsed share of the selling item's sales period.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bins: Vec<u64>,
    /// Sum of units * (price paid / default price) per bin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relative: Vec<f64>,
    /// Units sold net of returns (to tell a sell-out).
    #[serde(default)]
    pub net_sold: i64,
}

impl ProductSales {
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty() && self.net_sold == 0
    }

    /// Records a sale (`units` > 0) or a return (`units` < 0) at elapsed share `tau`.
    pub fn record(&mut self, units: i64, price: f64, tau: Option<f64>, default: f64) {
        self.net_sold = self.net_sold.saturating_add(units);
        let (Some(tau), true) = (tau, units > 0 && price.is_finite() && price >= 0.0) else {
            return;
        };
        if self.bins.len() != CURVE_BINS {
            self.bins = vec![0; CURVE_BINS];
            self.relative = vec![0.0; CURVE_BINS];
        }
        let bin = bin_of(tau);
        let units = units.unsigned_abs();
        self.bins[bin] = self.bins[bin].saturating_add(units);
        let relative = if default > 0.0 { price / default } else { 1.0 };
        self.relative[bin] += units as f64 * relative;
    }
}

/// How much of the booking curve an item spent at each price: `(price, mass)` pairs, the
/// mass being the share of the period's demand (by the curve believed at the time) that
/// passed while the price was in force.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exposure {
    pub levels: Vec<(f64, f64)>,
}

impl Exposure {
    /// The curve mass seen so far.
    pub fn mass(&self) -> f64 {
        self.levels.iter().map(|(_, w)| w).sum()
    }

    /// Adds `mass` at `price`; merges the two closest levels when there are too many.
    pub fn add(&mut self, price: f64, mass: f64) {
        if !(mass > 0.0 && price.is_finite()) {
            return;
        }
        match self
            .levels
            .iter_mut()
            .find(|(p, _)| (*p - price).abs() <= 1e-9 * price.abs().max(1.0))
        {
            Some((_, w)) => *w += mass,
            None => self.levels.push((price, mass)),
        }
        if self.levels.len() > EXPOSURE_LEVELS {
            self.levels.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (i, _) = self
                .levels
                .windows(2)
                .enumerate()
                .map(|(i, w)| (i, w[1].0 - w[0].0))
                .fold(
                    (0, f64::INFINITY),
                    |best, c| if c.1 < best.1 { c } else { best },
                );
            let (p1, w1) = self.levels[i];
            let (p2, w2) = self.levels.remove(i + 1);
            self.levels[i] = ((p1 * w1 + p2 * w2) / (w1 + w2), w1 + w2);
        }
    }
}

/// A booking curve: the share of a period's demand in each of [`CURVE_BINS`] equal bins
/// of the elapsed share (piecewise constant density; sums to 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub bins: Vec<f64>,
}

impl Curve {
    /// The curve of a new project: demand rising steadily toward the event, density
    /// proportional to `1 + tau` (42 % of it in the first half of the period).
    pub fn prior() -> Curve {
        Curve::from_density(|tau| 1.0 + tau)
    }

    /// A flat curve (every bin the same share).
    pub fn flat() -> Curve {
        Curve::from_density(|_| 1.0)
    }

    /// Integrates `density` over each bin and normalises.
    pub fn from_density(density: impl Fn(f64) -> f64) -> Curve {
        let n = CURVE_BINS as f64;
        let bins: Vec<f64> = (0..CURVE_BINS)
            .map(|k| {
                // Simpson's rule on each bin.
                let (a, b) = (k as f64 / n, (k + 1) as f64 / n);
                (density(a) + 4.0 * density((a + b) / 2.0) + density(b)) / 6.0 / n
            })
            .map(|v| v.max(0.0))
            .collect();
        Curve::normalised(bins)
    }

    fn normalised(bins: Vec<f64>) -> Curve {
        let total: f64 = bins.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return Curve::flat();
        }
        Curve {
            bins: bins.into_iter().map(|v| v / total).collect(),
        }
    }

    /// The share of demand before elapsed share `tau` (0 at the start, 1 at the end).
    pub fn cumulative(&self, tau: f64) -> f64 {
        let tau = if tau.is_finite() {
            tau.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let x = tau * CURVE_BINS as f64;
        let whole = (x as usize).min(CURVE_BINS);
        let mut sum: f64 = self.bins[..whole].iter().sum();
        if whole < CURVE_BINS {
            sum += self.bins[whole] * (x - whole as f64);
        }
        sum.clamp(0.0, 1.0)
    }

    /// The share of demand between `from` and `to`.
    pub fn mass(&self, from: f64, to: f64) -> f64 {
        (self.cumulative(to) - self.cumulative(from)).max(0.0)
    }
}

/// One past instance's sales of a product, as the curve learner reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct PastSales {
    /// Units bought per bin, summed over the product's items.
    pub bins: [f64; CURVE_BINS],
    /// Sum of units * relative price per bin.
    pub relative: [f64; CURVE_BINS],
    /// Whether the product sold out: bins from the last one with a sale on are censored.
    pub sold_out: bool,
}

impl PastSales {
    pub fn new() -> Self {
        PastSales {
            bins: [0.0; CURVE_BINS],
            relative: [0.0; CURVE_BINS],
            sold_out: false,
        }
    }

    /// A product's sales; `capacity` and `reserved` tell whether it sold out.
    pub fn of_product(sales: &ProductSales, capacity: Option<u64>, reserved: u64) -> Self {
        let mut past = PastSales::new();
        for (k, (&units, &relative)) in sales.bins.iter().zip(&sales.relative).enumerate() {
            if k < CURVE_BINS {
                past.bins[k] = units as f64;
                past.relative[k] = relative;
            }
        }
        past.sold_out = capacity.is_some_and(|c| {
            sales
                .net_sold
                .max(0)
                .unsigned_abs()
                .saturating_add(reserved)
                >= c
        });
        past
    }

    pub fn units(&self) -> f64 {
        self.bins.iter().sum()
    }
}

impl Default for PastSales {
    fn default() -> Self {
        Self::new()
    }
}

/// Pseudo-units of the prior curve in the learned one.
const CURVE_PRIOR_UNITS: f64 = 30.0;

/// Learns a booking curve from past instances' sales of a product, adjusted for the
/// prices they were sold at (a unit sold at a price above the default counts for more
/// demand: `exp(relative - 1)`, the price response the prior assumes at the default
/// price), with censoring after a sell-out. `None` without any usable sale.
///
/// Each instance has its own level: the fit alternates between the levels and the curve
/// (a multiplicative Poisson model), starting from the prior and shrunk toward it by
/// [`CURVE_PRIOR_UNITS`].
pub fn learn_curve(past: &[PastSales]) -> Option<Curve> {
    let prior = Curve::prior();
    let rows: Vec<([f64; CURVE_BINS], usize)> = past
        .iter()
        .filter(|p| p.units() > 0.0)
        .map(|p| {
            let mut adjusted = [0.0; CURVE_BINS];
            for ((slot, &units), &relative) in adjusted.iter_mut().zip(&p.bins).zip(&p.relative) {
                if units > 0.0 {
                    let r = relative / units;
                    *slot = units * (r - 1.0).clamp(-3.0, 3.0).exp();
                }
            }
            // Observed bins: all, or up to (not including) the bin that sold out.
            let observed = if p.sold_out {
                p.bins.iter().rposition(|&u| u > 0.0).unwrap_or(0)
            } else {
                CURVE_BINS
            };
            (adjusted, observed)
        })
        .filter(|(_, observed)| *observed > 0)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut g = prior.bins.clone();
    let mut levels = vec![0.0; rows.len()];
    for _ in 0..25 {
        for (j, (adjusted, observed)) in rows.iter().enumerate() {
            let seen: f64 = g[..*observed].iter().sum();
            let units: f64 = adjusted[..*observed].iter().sum();
            levels[j] = if seen > 0.0 { units / seen } else { 0.0 };
        }
        let mut next = vec![0.0; CURVE_BINS];
        for (k, slot) in next.iter_mut().enumerate() {
            let mut units = CURVE_PRIOR_UNITS * prior.bins[k];
            let mut level = CURVE_PRIOR_UNITS;
            for (j, (adjusted, observed)) in rows.iter().enumerate() {
                if k < *observed {
                    units += adjusted[k];
                    level += levels[j];
                }
            }
            *slot = units / level;
        }
        g = Curve::normalised(next).bins;
    }
    Some(Curve { bins: g })
}

/// What the user told the service about an item, the priors of [`fit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    /// Units the item would sell over the whole period at its default price.
    pub level: f64,
    /// The item's default price.
    pub default: f64,
    /// Standard deviation of log(level).
    pub level_sd: f64,
    /// Standard deviation of the price response, relative to its prior.
    pub response_sd: f64,
}

impl Prior {
    /// The prior price response: the default price maximises revenue when capacity does
    /// not bind (`b * d = 1`).
    pub fn response(&self) -> f64 {
        1.0 / self.default.max(1e-6)
    }
}

/// The estimate of an item's demand.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// A: units over the whole period at the default price.
    pub level: f64,
    /// b: the price response (relative demand falls by `exp(-b * change)`).
    pub response: f64,
}

impl Estimate {
    /// Expected units over curve mass `mass` at `price`.
    pub fn demand(&self, default: f64, mass: f64, price: f64) -> f64 {
        self.level * mass * (-self.response * (price - default)).exp()
    }
}

/// MAP estimate of (A, b) for one item: Poisson regression of its units on its exposure,
/// with the data's weight `evidence` (1 = full; less when the curve it was measured
/// against is only the prior) and Gaussian priors on log A and on b.
pub fn fit(prior: &Prior, sales: &SalesStats, exposure: &Exposure, evidence: f64) -> Estimate {
    let d = prior.default.max(1e-6);
    let (a0, b0) = (prior.level.max(1e-6).ln(), prior.response());
    let (inv_va, inv_vb) = (
        1.0 / (prior.level_sd * prior.level_sd),
        1.0 / (prior.response_sd * b0).powi(2),
    );
    let w = evidence.clamp(0.0, 1.0);
    let n = sales.units as f64;
    // Sum over units of (price paid - default).
    let s = sales.paid - n * d;
    let (mut a, mut b) = (a0, b0);
    for _ in 0..20 {
        let (mut f, mut fb, mut fbb) = (0.0, 0.0, 0.0);
        for &(p, m) in &exposure.levels {
            let x = p - d;
            let e = m * (-b * x).exp();
            f += e;
            fb -= x * e;
            fbb += x * x * e;
        }
        let ea = a.exp();
        let ga = w * (n - ea * f) - (a - a0) * inv_va;
        let gb = w * (-s - ea * fb) - (b - b0) * inv_vb;
        let haa = -w * ea * f - inv_va;
        let hab = -w * ea * fb;
        let hbb = -w * ea * fbb - inv_vb;
        let det = haa * hbb - hab * hab;
        if !(det > 0.0 && det.is_finite()) {
            break;
        }
        // Newton step on a concave objective, with the step kept sane.
        let da = (-(hbb * ga - hab * gb) / det).clamp(-1.0, 1.0);
        let db = (-(haa * gb - hab * ga) / det).clamp(-0.5 * b, 0.5 * b);
        a += da;
        b = (b + db).clamp(0.02 * b0, 50.0 * b0);
        if da.abs() < 1e-7 && db.abs() < 1e-9 * b0 {
            break;
        }
    }
    Estimate {
        level: a.exp(),
        response: b,
    }
}

#[cfg(test)]
mod tests;
