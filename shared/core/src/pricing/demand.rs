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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::models::elapsed_share;
use crate::ids::ItemId;
use crate::time::{Period, Timestamp};

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
    /// The units per bin read at the default prices: each unit counts
    /// [`units_at_default`] of its relative price, so a bin in which the price moved is
    /// read by the prices its buyers met, not by the mean price they paid (empty in
    /// records that began before it was kept: they are read by `relative`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_default: Vec<f64>,
    /// Units sold net of returns (to tell a sell-out).
    #[serde(default)]
    pub net_sold: i64,
    /// The elapsed share at which the product first sold out (its capacity less its
    /// reservations gone): the curve learner reads no demand after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sold_out_at: Option<f64>,
    /// The period the bins are shares of: the latest start and the latest end among the
    /// sales periods of the items that sold (`None` in records stored before it was kept:
    /// read as ended). The share of it elapsed at a time is never more than any of those
    /// items' own, so a learner reading an instance that is still selling takes the bins
    /// still to come as unknown, never as no demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Period>,
    /// Units bought of each of the first items that sold (at most [`MAX_ITEM_SHARES`], with
    /// at most [`MAX_ITEM_SHARE_ID_BYTES`] of ids), counted as
    /// `bins` counts them (sales with a time; returns are not subtracted): how the
    /// product's demand splits among its items, which the next instance's items start
    /// from (a premium item may sell a tenth of a product, not half).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub items: BTreeMap<ItemId, u64>,
}

/// Items whose share of a product's demand a [`ProductSales`] keeps (the record stays
/// small however many items the product has; the items beyond it take equal shares).
pub const MAX_ITEM_SHARES: usize = 32;

/// The most bytes of item ids a [`ProductSales`] keeps shares of: with ids of up to 128
/// characters, 32 items would add 4.4 KB to a record written at every commit that sells
/// one of them (on DynamoDB, 10 more write units per transaction); this bounds what the
/// shares add to about 0.8 KB (docs/performance.md).
pub const MAX_ITEM_SHARE_ID_BYTES: usize = 512;

impl ProductSales {
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty() && self.net_sold == 0
    }

    /// [`own_shape`] of this record at `now` (a product of a new project: the shape its
    /// own sales show so far, up to its sell-out).
    pub fn own_shape(&self, now: Timestamp) -> f64 {
        let mut units = [0.0; CURVE_BINS];
        if self.at_default.len() == CURVE_BINS {
            units.copy_from_slice(&self.at_default);
        } else {
            for (u, &b) in units.iter_mut().zip(&self.bins) {
                *u = b as f64;
            }
        }
        let end = self.period.map_or(0.0, |p| elapsed_share(&p, now));
        own_shape(&units, end.min(self.sold_out_at.unwrap_or(1.0)))
    }

    /// Records a sale (`units` > 0) or a return (`units` < 0) at elapsed share `tau` of
    /// the selling item's sales `period`; `left` is what the product has left to sell
    /// after it, when it has a capacity.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        item: &ItemId,
        units: i64,
        price: f64,
        tau: Option<f64>,
        default: f64,
        left: Option<i64>,
        period: &Period,
    ) {
        self.net_sold = self.net_sold.saturating_add(units);
        if self.sold_out_at.is_none() && units > 0 && left.is_some_and(|l| l <= 0) {
            self.sold_out_at = tau.map(|t| t.clamp(0.0, 1.0));
        }
        let (Some(tau), true) = (tau, units > 0 && price.is_finite() && price >= 0.0) else {
            return;
        };
        if self.bins.len() != CURVE_BINS {
            self.bins = vec![0; CURVE_BINS];
            self.relative = vec![0.0; CURVE_BINS];
            self.at_default = vec![0.0; CURVE_BINS];
        }
        self.period = Some(match self.period {
            Some(p) => Period {
                start: p.start.max(period.start),
                end: p.end.max(period.end),
            },
            None => *period,
        });
        let bin = bin_of(tau);
        let units = units.unsigned_abs();
        self.bins[bin] = self.bins[bin].saturating_add(units);
        let relative = if default > 0.0 { price / default } else { 1.0 };
        self.relative[bin] += units as f64 * relative;
        if let Some(v) = self.at_default.get_mut(bin) {
            *v += units as f64 * units_at_default(relative);
        }
        if let Some(v) = self.items.get_mut(item) {
            *v = v.saturating_add(units);
        } else if self.items.len() < MAX_ITEM_SHARES
            && self.items.keys().map(|k| k.as_str().len()).sum::<usize>() + item.as_str().len()
                <= MAX_ITEM_SHARE_ID_BYTES
        {
            self.items.insert(item.clone(), units);
        }
    }
}

/// The demand at the default price that a unit bought at relative price `r` (price /
/// default) stands for, as the curve learner reads past sales: `1 / F(r)`, `F` the
/// [`logistic_response`] with the prior response, at most [`MAX_UNITS_AT_DEFAULT`].
///
/// Each unit is weighed by the price its buyer met (an inverse-probability weight): the
/// expected sum over a bin is the demand the bin had at the default prices, however the
/// price moved within it. Read instead at the mean price the bin's units were sold at, a
/// bin in which the price rose steeply (a product selling out in a late surge: 52 to 100
/// within a day and a half) looked mostly sold at the low prices, and the surge was read
/// 30 % smaller than it was (docs/pricing.md).
pub fn units_at_default(r: f64) -> f64 {
    let f = logistic_response(PRIOR_RELATIVE_RESPONSE, r);
    if f > 0.0 {
        (1.0 / f).min(MAX_UNITS_AT_DEFAULT)
    } else {
        MAX_UNITS_AT_DEFAULT
    }
}

/// The most a unit sold at a raised price counts for at the default (a price one buyer in
/// ten would still pay): more would let one buyer's luck set a bin of the curve.
pub const MAX_UNITS_AT_DEFAULT: f64 = 10.0;

/// How much of the booking curve an item spent at each price: `(price, mass)` pairs, the
/// mass being the share of the period's demand (by the curve believed at the time) that
/// passed while the price was in force.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exposure {
    pub levels: Vec<(f64, f64)>,
    /// The demand estimate of the calculation that carried it: the next fit starts there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
    /// Recent sales against what the estimates expected ([`Pace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<Pace>,
    /// Set once the product sold nothing at all while the user's belief expected 15 units
    /// or more: the default is above the market, and the cut floors, which rest on that
    /// belief, no longer hold the item (see `revenue::Shortfall`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// The elapsed share at the item's first calculation: what happened before it (an
    /// item registered mid-sale) the service did not see, so the belief expects no sales
    /// of it. Absent on exposures stored before it was kept: the period's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_from: Option<f64>,
}

/// The horizons of [`Pace`]'s windows, as shares of the sales period (0.6, 1.5 and 4.5
/// days of a 30-day period).
pub const PACE_WINDOWS: [f64; 3] = [0.02, 0.05, 0.15];

/// How an item's recent sales compare with what the model expected of them: per window
/// of [`PACE_WINDOWS`], the units bought and the units the estimate of the time expected
/// at the prices in force, both discounted exponentially with the window's horizon (of
/// the elapsed share). It is what tells a surge (buyers coming faster than the booking
/// curve believed) within hours, where the fit over the whole period, weighing every
/// sale the same, would take days ([`Pace::factor`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pace {
    /// The item's units bought when it was last brought up to date.
    #[serde(rename = "u")]
    pub units: u64,
    /// Discounted units bought, per window.
    #[serde(rename = "s")]
    pub sold: [f64; PACE_WINDOWS.len()],
    /// Discounted units expected, per window.
    #[serde(rename = "x")]
    pub expected: [f64; PACE_WINDOWS.len()],
    /// Since when (elapsed share) the shortest window has shown buyers coming faster than
    /// expected, while it does.
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub since: Option<f64>,
}

impl Pace {
    /// Brought up to date at elapsed share `to`, from `from`, when the item's units bought
    /// were `units` in all and the estimate expected `expected` of them meanwhile.
    /// An expected count that is not a finite number starts the pace afresh: read as no
    /// buyers expected, every unit bought would look like a surge.
    pub fn advance(&self, units: u64, expected: f64, from: f64, to: f64) -> Pace {
        if !expected.is_finite() {
            return Pace::starting(units.max(self.units));
        }
        let bought = units.saturating_sub(self.units) as f64;
        let expected = expected.max(0.0);
        let elapsed = if (to - from).is_finite() {
            (to - from).max(0.0)
        } else {
            0.0
        };
        let mut next = Pace {
            units: units.max(self.units),
            ..Pace::default()
        };
        for (w, horizon) in PACE_WINDOWS.iter().enumerate() {
            let keep = (-elapsed / horizon).exp();
            next.sold[w] = self.sold[w] * keep + bought;
            next.expected[w] = self.expected[w] * keep + expected;
        }
        // A surge first seen now began at most the shortest window ago, however long
        // the gap since the previous calculation (its horizon grows with its age).
        next.since = if next.ahead(0) {
            Some(self.since.unwrap_or(from.max(to - PACE_WINDOWS[0])))
        } else {
            None
        };
        next
    }

    /// A pace with nothing counted yet, for an item that has bought `units` so far: only
    /// units bought from now on count.
    pub fn starting(units: u64) -> Pace {
        Pace {
            units,
            ..Pace::default()
        }
    }

    /// Whether window `w` shows buyers coming faster than expected beyond chance: its
    /// units bought exceed the expected by [`PACE_Z`] Poisson standard deviations.
    fn ahead(&self, w: usize) -> bool {
        self.sold[w] - self.expected[w] > PACE_Z * (self.expected[w] + 1.0).sqrt()
    }

    /// How much faster than expected buyers come now: while the shortest window shows
    /// it, the largest ratio of units bought to units expected over the windows that show
    /// it, each shrunk toward 1 by [`PACE_PRIOR_UNITS`]; else 1. A pace behind the
    /// estimate is left to the fit (a slow hour is not a trend, and cutting on it is
    /// what loses to the fixed price).
    pub fn factor(&self) -> f64 {
        if self.since.is_none() {
            return 1.0;
        }
        let k = PACE_PRIOR_UNITS;
        (0..PACE_WINDOWS.len())
            .filter(|&w| self.ahead(w))
            .map(|w| (self.sold[w] + k) / (self.expected[w] + k))
            .fold(1.0, f64::max)
    }

    /// How far ahead of `tau` the pace is taken to hold: twice as long as it has held so
    /// far (at least the shortest window). A surge that lasts to the event is soon read
    /// as such, and a passing burst (a mention in the press, a newsletter) is not taken
    /// for the rest of the period: applied to all of it, a day and a half of six times
    /// the buyers in mid-period cost 8.6 points against the optimum (docs/pricing.md).
    pub fn horizon(&self, tau: f64) -> f64 {
        self.since
            .map_or(0.0, |since| 2.0 * (tau - since).max(PACE_WINDOWS[0]))
    }
}

/// Pseudo-units of expected sales that shrink a window's ratio toward 1.
pub const PACE_PRIOR_UNITS: f64 = 5.0;
/// How many Poisson standard deviations a window's units must exceed its expected ones by
/// to count.
pub const PACE_Z: f64 = 2.5;

impl Exposure {
    /// The curve mass seen so far.
    pub fn mass(&self) -> f64 {
        // Folded from +0: an empty float sum is -0 (IEEE 754), which explanations showed as
        // `"demandObserved": -0.0`.
        self.levels.iter().fold(0.0, |sum, (_, w)| sum + w)
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
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    bins: Vec<f64>,
    /// `starts[k]`: the cumulative share at the start of bin `k` (`starts[CURVE_BINS]`,
    /// the whole): [`Curve::cumulative`] is read several times per item and calculation,
    /// so the bins are summed once, here.
    starts: [f64; CURVE_BINS + 1],
}

impl Curve {
    /// The curve of these shares per bin, as they are ([`Curve::normalised`] makes them
    /// sum to 1).
    fn new(bins: Vec<f64>) -> Curve {
        let mut starts = [0.0; CURVE_BINS + 1];
        let mut sum = 0.0;
        for (k, b) in bins.iter().take(CURVE_BINS).enumerate() {
            sum += b;
            starts[k + 1] = sum;
        }
        Curve { bins, starts }
    }

    /// The curve of a new project before its own sales show a shape ([`own_shape`]):
    /// flat. With it the model raises prices when sales run ahead but cuts below the
    /// default only within narrow limits (see `revenue`), so a flat prior reads neither a
    /// late surge nor a slow start as weak demand, and does not chase early sales that a
    /// rising prior would call strong.
    pub fn prior() -> Curve {
        Curve::flat()
    }

    /// A flat curve (every bin the same share).
    pub fn flat() -> Curve {
        Curve::from_density(|_| 1.0)
    }

    /// The curve whose cumulative share by elapsed share `tau` is `tau^a` (`a` > 1: rising
    /// toward the event; 1: flat).
    pub fn power(a: f64) -> Curve {
        let n = CURVE_BINS as f64;
        let a = if a.is_finite() && a > 0.0 { a } else { 1.0 };
        Curve::normalised(
            (0..CURVE_BINS)
                .map(|k| ((k + 1) as f64 / n).powf(a) - (k as f64 / n).powf(a))
                .collect(),
        )
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
        Curve::new(bins.into_iter().map(|v| v / total).collect())
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
        let mut sum = self.starts[whole];
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

/// The standard deviation of `ln a` around 0 (flat) in [`own_shape`]'s prior: the prior
/// weighs as much as the timing of about 25 units (`1 / 0.2^2`; `ln a` read from `n`
/// units has a standard deviation of about `1 / sqrt(n)`), so a rising curve is read half
/// way after 25 units, and a flat market's own noise moves `a` by about 0.08
/// (docs/pricing.md).
pub const OWN_SHAPE_SD: f64 = 0.2;

/// The most a bin counts in [`own_shape`], in multiples of the instance's mean units per
/// bin so far: a burst (a press mention) is not a curve rising toward the event.
const OWN_SHAPE_BIN_CAP: f64 = 2.0;

/// A new project's booking curve as its instance's own sales show it: the exponent `a`
/// of the power curve (cumulative share `tau^a`, [`Curve::power`]) that best explains when
/// the product's units came, read at the default prices (`units` per bin, the record's
/// `at_default`) up to elapsed share `end` (where the instance is, or its sell-out). The
/// maximum a posteriori, with `ln a` normal around 0 (flat) of standard deviation
/// [`OWN_SHAPE_SD`]; only the timing counts (the level is profiled out), and no bin
/// counts more than [`OWN_SHAPE_BIN_CAP`] times the mean. 1 (flat) without sales.
pub fn own_shape(units: &[f64; CURVE_BINS], end: f64) -> f64 {
    let n = CURVE_BINS as f64;
    let end = if end.is_finite() { end.min(1.0) } else { 0.0 };
    // The bins read, and ln of each one's end (the last one's is `end`).
    let read = ((end * n).ceil() as usize).min(CURVE_BINS);
    let total: f64 = units[..read].iter().map(|u| u.max(0.0)).sum();
    if !(total > 0.0 && total.is_finite() && end > 0.0) {
        return 1.0;
    }
    let mut bins = [(0.0, 0.0); CURVE_BINS];
    for (k, bin) in bins.iter_mut().enumerate().take(read) {
        let (lo, hi) = (k as f64 / n, ((k + 1) as f64 / n).min(end));
        let capped = units[k]
            .max(0.0)
            .min(OWN_SHAPE_BIN_CAP * total / end * (hi - lo));
        *bin = (capped, hi.ln());
    }
    let bins = &bins[..read];
    let counted: f64 = bins.iter().map(|b| b.0).sum();
    let ln_end = end.ln();
    // Log posterior of ln a: each unit's share, in its bin, of the curve so far.
    let posterior = |ln_a: f64| -> f64 {
        let a = ln_a.exp();
        let (mut l, mut below) = (-counted * a * ln_end, 0.0);
        for &(u, ln_hi) in bins {
            let upto = (a * ln_hi).exp();
            if u > 0.0 {
                l += u * (upto - below).max(1e-300).ln();
            }
            below = upto;
        }
        l - ln_a * ln_a / (2.0 * OWN_SHAPE_SD * OWN_SHAPE_SD)
    };
    // ln a within [-1, 1.2] (a from 0.37 to 3.3), to about 0.005.
    golden_max(posterior, -1.0, 1.2, 2e-3).exp()
}

/// The maximiser of a unimodal `f` on [lo, hi], to `tol` relative to the interval, by
/// golden-section search (the simulator's references use it too).
pub fn golden_max(f: impl Fn(f64) -> f64, lo: f64, hi: f64, tol: f64) -> f64 {
    const R: f64 = 0.618_033_988_749_894_8;
    let (mut a, mut b) = (lo, hi);
    if b <= a {
        return a;
    }
    let eps = tol * (hi - lo).max(1e-12);
    let mut c = b - R * (b - a);
    let mut d = a + R * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    while b - a > eps {
        if fc >= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - R * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + R * (b - a);
            fd = f(d);
        }
    }
    let mid = (a + b) * 0.5;
    // The ends can be the maximum (the search never evaluates them).
    [lo, mid, hi]
        .into_iter()
        .map(|x| (x, f(x)))
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .map_or(mid, |(x, _)| x)
}

/// One past instance's sales of a product, as the curve learner reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct PastSales {
    /// Units bought per bin, summed over the product's items.
    pub bins: [f64; CURVE_BINS],
    /// Sum of units * relative price per bin.
    pub relative: [f64; CURVE_BINS],
    /// Units per bin read at the default prices ([`units_at_default`]), when the record
    /// keeps them.
    pub at_default: Option<[f64; CURVE_BINS]>,
    /// When the product sold out (elapsed share): no demand is read after it.
    pub sold_out_at: Option<f64>,
    /// How far through its sales period the instance was when it was read (elapsed
    /// share; 1 once the period has ended): the bins after it are unknown, not empty.
    pub read_until: f64,
    /// Units bought of each item (see [`ProductSales::items`]).
    pub items: BTreeMap<ItemId, u64>,
}

impl PastSales {
    pub fn new() -> Self {
        PastSales {
            bins: [0.0; CURVE_BINS],
            relative: [0.0; CURVE_BINS],
            at_default: None,
            sold_out_at: None,
            read_until: 1.0,
            items: BTreeMap::new(),
        }
    }

    /// A product's sales as read at `now`; `capacity` and `reserved` tell whether it sold
    /// out. An instance still selling (e.g. a festival's other day) is read up to the
    /// share of its period elapsed at `now`.
    pub fn of_product(
        sales: &ProductSales,
        capacity: Option<u64>,
        reserved: u64,
        now: Timestamp,
    ) -> Self {
        let mut past = PastSales::new();
        past.read_until = sales.period.map_or(1.0, |p| elapsed_share(&p, now));
        past.items = sales.items.clone();
        for (k, (&units, &relative)) in sales.bins.iter().zip(&sales.relative).enumerate() {
            if k < CURVE_BINS {
                past.bins[k] = units as f64;
                past.relative[k] = relative;
            }
        }
        if sales.at_default.len() == CURVE_BINS && sales.bins.len() == CURVE_BINS {
            let mut at_default = [0.0; CURVE_BINS];
            at_default.copy_from_slice(&sales.at_default);
            past.at_default = Some(at_default);
        }
        past.sold_out_at = sales.sold_out_at.or_else(|| {
            // Sold out without a time (sales without timestamps): after the last sale.
            let out = capacity.is_some_and(|c| {
                sales
                    .net_sold
                    .max(0)
                    .unsigned_abs()
                    .saturating_add(reserved)
                    >= c
            });
            let last = past.bins.iter().rposition(|&u| u > 0.0)?;
            out.then_some((last + 1) as f64 / CURVE_BINS as f64)
        });
        past
    }

    pub fn units(&self) -> f64 {
        self.bins.iter().sum()
    }

    /// Units in the bins read (see [`learn`]).
    fn units_read(&self) -> f64 {
        observed(self)
            .iter()
            .enumerate()
            .filter(|&(k, &o)| read_bin(self, k, o))
            .map(|(k, _)| self.bins[k])
            .sum()
    }
}

impl Default for PastSales {
    fn default() -> Self {
        Self::new()
    }
}

/// The least uncertainty of a level learned from past instances (sd of log(level)): the
/// next edition may differ from the last ones even when they agreed, and the sales of the
/// instance itself must still be able to move the estimate.
pub const MIN_HISTORY_LEVEL_SD: f64 = 0.1;

/// Pseudo-units of the prior curve in the learned one.
const CURVE_PRIOR_UNITS: f64 = 30.0;

/// Learns a booking curve from past instances' sales of a product, adjusted for the
/// prices they were sold at, with censoring after a sell-out. `None` without any usable
/// sale. See [`learn`].
pub fn learn_curve(past: &[PastSales]) -> Option<Curve> {
    learn(past).map(|l| l.curve)
}

/// What past instances teach about a product.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    pub curve: Curve,
    /// Units a whole period sells at the default prices (the mean over the instances),
    /// stated for `response`.
    pub level: f64,
    /// How far from the default the instances sold (the mean relative price less 1, over
    /// the exposure `level` reads): `d log(level) / d beta`, so an error of the response
    /// is an error of `level` by this much per unit.
    pub distance: f64,
    /// The standard deviation of log(level) as a forecast of the next edition's demand at
    /// the prices the instances sold at: the editions' spread, the error of their mean,
    /// and the Poisson error of the units read; at least [`MIN_HISTORY_LEVEL_SD`].
    pub level_sd: f64,
    /// The relative price response the instances show ([`learn_response`]; the prior
    /// when their prices do not tell it).
    pub response: Response,
    /// Each item's share of the sales of the instances that sold it (see
    /// [`Learned::item_shares`]); empty for products pooled.
    pub items: BTreeMap<ItemId, f64>,
}

/// Pseudo-units each item of an instance's record gets in its share of the instance's
/// sales ([`learn`]): an item an edition barely sold is not taken to have no demand.
const ITEM_SHARE_PRIOR_UNITS: f64 = 1.0;

impl Learned {
    /// Each of `items`' share of the product's demand, as the instances sold them (at
    /// the prices they sold at: read at the default prices through the prior response,
    /// an item the model had priced well above its default counted for more than it
    /// sold, and the split was worse than an equal one). An item the instances do not
    /// tell (new to the product, never sold with a time, or beyond [`MAX_ITEM_SHARES`])
    /// gets an equal share, `1 / items`, and the known ones split the rest as they sold;
    /// `None` (all equal) when none is known.
    pub fn item_shares<'a>(&self, items: impl IntoIterator<Item = &'a ItemId>) -> Option<Vec<f64>> {
        let known: Vec<Option<f64>> = items
            .into_iter()
            .map(|id| self.items.get(id).copied())
            .collect();
        let equal = 1.0 / known.len().max(1) as f64;
        let unknown = known.iter().filter(|s| s.is_none()).count() as f64;
        let total: f64 = known.iter().flatten().sum();
        if total.is_nan() || total <= 0.0 {
            return None;
        }
        let rest = 1.0 - unknown * equal;
        Some(
            known
                .iter()
                .map(|s| s.map_or(equal, |s| rest * s / total))
                .collect(),
        )
    }
}

/// A relative price response `b * d` (demand falls by `exp(-b * d * (r - 1))` at relative
/// price `r`) with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Response {
    /// The posterior mean of `b * d`.
    pub relative: f64,
    /// Its posterior standard deviation.
    pub sd: f64,
    /// How many past instances it was learned from.
    pub instances: usize,
    /// How far the editions' demand levels spread about the product's (sd of the log
    /// level, measured from the instances and shrunk toward [`EDITION_LEVEL_SD`]; that
    /// value itself when the instances cannot measure it).
    pub spread: f64,
}

impl Response {
    /// The prior response, before any past instance: [`PRIOR_RELATIVE_RESPONSE`] with a
    /// relative standard deviation of `relative_sd`.
    pub fn prior(relative_sd: f64) -> Response {
        Response {
            relative: PRIOR_RELATIVE_RESPONSE,
            sd: relative_sd * PRIOR_RELATIVE_RESPONSE,
            instances: 0,
            spread: EDITION_LEVEL_SD,
        }
    }
}

/// The relative standard deviation of the prior price response (see [`fit`]'s priors).
pub const PRIOR_RESPONSE_SD: f64 = 0.5;

/// Between-edition variation of a product's demand level assumed before the instances
/// can measure it (sd of the log level: editions within about 10 % of each other), and
/// the weight of that assumption against their measured spread (in instances).
const EDITION_LEVEL_SD: f64 = 0.1;
const EDITION_LEVEL_PRIOR_WEIGHT: f64 = 1.0;

/// The price response `b * d` assumed before any price variation was seen: demand falls
/// by `exp(-1.5)` when the price rises by its default (the default is a clearing price,
/// above the revenue-maximising one).
pub const PRIOR_RELATIVE_RESPONSE: f64 = 1.5;

/// How demand at relative price `r` (price / default) compares with demand at the default,
/// as the curve learner reads past sales: buyers' willingness to pay logistic around the
/// default price, with the response `beta` at the default (`2 / (1 + exp(2 beta (r - 1)))`).
///
/// At the default it has the exponential response of [`fit`] (`exp(-beta (r - 1))`, the
/// same value and slope), but it steepens as the price rises: most buyer
/// populations have a willingness to pay that thins out above its middle (log-concave
/// demand: normal, logistic, uniform), and past instances raise their prices most in the
/// part of the period where they sell out, often the busiest. A unit sold at 1.7 times the
/// default stands for 2.9 units at the default with the exponential response, for 4.6
/// with this one: read the exponential way, a late surge sold at raised prices looked
/// smaller than it was, and the next instance cut its price before the surge and sold out
/// early (docs/pricing.md).
pub fn logistic_response(beta: f64, r: f64) -> f64 {
    2.0 / (1.0 + (2.0 * beta * (r - 1.0)).clamp(-50.0, 50.0).exp())
}

/// Learns from past instances of a product:
/// 1. each instance's units per bin are taken as Poisson with mean `level * curve *
///    F(relative)` ([`logistic_response`] at the relative price the bin sold at, with the
///    prior response); bins after a sell-out, and bins an instance still selling has not
///    reached, are not read, and bins no instance read are taken to be at least as dense
///    as the last ones read (booking curves rise toward the event);
/// 2. the curve and each instance's level are fitted by alternating (a multiplicative
///    Poisson model), shrunk toward the prior curve by [`CURVE_PRIOR_UNITS`];
/// 3. the price response is learned from how the instances' prices differed
///    ([`learn_response`]);
/// 4. the level is the mean of the instances' levels, each weighted by the share of its
///    demand (by the curve) that had passed when it was read: an ended instance counts
///    fully, one still selling by how far it has come. Each instance's level is the one
///    [`fit`]'s exponential response (the learned one) needs to expect its units at the
///    prices they sold at, over the learned curve;
/// 5. each item's share of the product's sales is averaged over the instances that sold
///    it ([`Learned::item_shares`]).
pub fn learn(past: &[PastSales]) -> Option<Learned> {
    learn_with(past, true)
}

/// [`learn`] without steps 3 and 5 (the price response stays the prior): for instances of
/// different products pooled (their levels differ by product, not by edition), which
/// only lend a new product their curve.
pub fn learn_pooled(past: &[PastSales]) -> Option<Learned> {
    learn_with(past, false)
}

fn learn_with(past: &[PastSales], per_product: bool) -> Option<Learned> {
    let rows: Vec<&PastSales> = past
        .iter()
        .filter(|p| p.units() > 0.0 && read_end(p) > 0.0)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let curve = fit_curve(&rows, PRIOR_RELATIVE_RESPONSE);
    let prior = Response::prior(PRIOR_RESPONSE_SD);
    let response = if per_product {
        learn_response(&rows, prior)
    } else {
        prior
    };
    let (level, distance) = level_for(&rows, &curve, response.relative);
    let editions = rows.len() as f64;
    let units: f64 = rows.iter().map(|p| p.units_read()).sum();
    let level_sd = (response.spread.powi(2) * (1.0 + 1.0 / editions) + 1.0 / units.max(1.0))
        .sqrt()
        .max(MIN_HISTORY_LEVEL_SD);
    let items = if per_product {
        mean_item_shares(&rows)
    } else {
        BTreeMap::new()
    };
    Some(Learned {
        level,
        distance,
        level_sd,
        curve,
        response,
        items,
    })
}

/// Each item's share of its instance's sales, with [`ITEM_SHARE_PRIOR_UNITS`], averaged
/// over the instances whose record has the item: an item added in the latest edition
/// gets the share it sold there, not a third of it.
fn mean_item_shares(rows: &[&PastSales]) -> BTreeMap<ItemId, f64> {
    let mut sums: BTreeMap<ItemId, (f64, f64)> = BTreeMap::new();
    for p in rows {
        let units: f64 = p.items.values().map(|&u| u as f64).sum();
        let total = units + ITEM_SHARE_PRIOR_UNITS * p.items.len() as f64;
        for (id, &u) in &p.items {
            let (sum, count) = sums.entry(id.clone()).or_default();
            *sum += (u as f64 + ITEM_SHARE_PRIOR_UNITS) / total;
            *count += 1.0;
        }
    }
    sums.into_iter()
        .map(|(id, (sum, count))| (id, sum / count))
        .collect()
}

/// The level (units over a whole period at the default prices) that [`fit`]'s
/// exponential response `beta` needs to expect the instances' units at the prices they
/// sold at, over `curve`: the mean over the instances, each weighted by the share of its
/// demand that had passed when it was read.
fn level_for(rows: &[&PastSales], curve: &Curve, beta: f64) -> (f64, f64) {
    let (mut sum, mut weights, mut distance) = (0.0, 0.0, 0.0);
    for p in rows {
        let observed = observed(p);
        let relative = relative_prices(p, &observed);
        let (mut seen, mut moved) = (0.0, 0.0);
        for k in 0..CURVE_BINS {
            let r = relative[k];
            let e = curve.bins[k] * observed[k] * (-beta * (r - 1.0)).clamp(-50.0, 50.0).exp();
            seen += e;
            moved += e * (r - 1.0);
        }
        let level = if seen > 0.0 {
            p.units_read() / seen
        } else {
            0.0
        };
        let weight = curve.cumulative(p.read_until);
        sum += weight * level;
        weights += weight;
        if seen > 0.0 {
            distance += weight * moved / seen;
        }
    }
    if weights > 0.0 {
        (sum / weights, distance / weights)
    } else {
        (0.0, 0.0)
    }
}

/// One past instance's bin as [`learn_response`] reads it: the instance, its units, the
/// observed fraction of the bin, its relative price less 1.
#[derive(Debug, Clone, Copy)]
struct Cell {
    instance: usize,
    units: f64,
    observed: f64,
    x: f64,
}

/// Learns the relative price response `beta` from past instances of a product, starting
/// from `prior`.
///
/// Model: instance `j` sells in bin `k` Poisson units of mean `G_k * exp(u_j) * o_jk *
/// exp(-beta * (r_jk - 1))`: `G_k` the bin's demand at the default (any booking curve and
/// level: it is not assumed, the fit conditions on each bin's total over the instances),
/// `u_j` the instance's deviation from the product's usual level, `o_jk` the observed
/// fraction of the bin (censored after a sell-out or where an instance still selling has
/// not come), `r_jk` the mean relative price its units sold at. Conditioning on the bin
/// totals leaves, per bin, a multinomial split of the units between the instances that
/// read it (a conditional logit), so `beta` is learned only from how the instances'
/// prices differed within the same share of the period: not from the booking curve,
/// and not from a bin's price answering the sales before it (those are independent of
/// the bin's own buyers). What remains to mistake for a price effect is a difference of
/// level between editions (a stronger edition sells more and, pricing by its sales, at
/// higher prices): `u_j` has a Gaussian prior of standard deviation `tau`, measured from
/// the spread of the instances' totals about the fit (Pearson's statistic, a method of
/// moments) and shrunk toward [`EDITION_LEVEL_SD`] with the weight of
/// [`EDITION_LEVEL_PRIOR_WEIGHT`] instances (two instances cannot measure it).
///
/// The result is the maximum a posteriori `beta` with the posterior standard deviation
/// from the curvature (the prior's when no two instances priced a share of the period
/// differently). Returns, out-of-order sales and sales without a time do not reach it:
/// it reads the units per bin that the apply step keeps.
pub fn learn_response(past: &[&PastSales], prior: Response) -> Response {
    let mut cells: Vec<Vec<Cell>> = vec![Vec::new(); CURVE_BINS];
    for (j, p) in past.iter().enumerate() {
        let observed = observed(p);
        let relative = relative_prices(p, &observed);
        for (k, &o) in observed.iter().enumerate().skip(1) {
            // The price the bin opened at (the one its previous bin's units sold at):
            // set before any of the bin's buyers came, it does not answer their number.
            if o > 0.0 {
                cells[k].push(Cell {
                    instance: j,
                    units: if read_bin(p, k, o) { p.bins[k] } else { 0.0 },
                    observed: o,
                    x: relative[k - 1] - 1.0,
                });
            }
        }
    }
    // A bin tells something only when two instances read it and it sold.
    cells.retain(|c| c.len() >= 2 && c.iter().any(|c| c.units > 0.0));
    let instances = past.len();
    if cells.is_empty() || instances < 2 {
        return prior;
    }
    // First with every edition at the same level, to measure how much they differ.
    let (beta, _, _) = response_map(&cells, instances, prior, None, 0.0);
    let mut expected = vec![0.0; instances];
    let mut sold = vec![0.0; instances];
    for bin in &cells {
        let total: f64 = bin.iter().map(|c| c.units).sum();
        let weights: Vec<f64> = bin
            .iter()
            .map(|c| c.observed * (-beta * c.x).clamp(-50.0, 50.0).exp())
            .collect();
        let sum: f64 = weights.iter().sum();
        for (c, w) in bin.iter().zip(&weights) {
            expected[c.instance] += total * w / sum;
            sold[c.instance] += c.units;
        }
    }
    let read: Vec<(f64, f64)> = expected
        .iter()
        .zip(&sold)
        .filter(|(e, _)| **e > 0.0)
        .map(|(e, s)| (*e, *s))
        .collect();
    // Degrees of freedom: the instances' totals less their sum and beta.
    let df = read.len().saturating_sub(2) as f64;
    let measured = if df > 0.0 {
        let pearson: f64 = read.iter().map(|(e, s)| (s - e).powi(2) / e).sum();
        let mean = read.iter().map(|(e, _)| e).sum::<f64>() / read.len() as f64;
        (pearson / df - 1.0).max(0.0) / mean
    } else {
        0.0
    };
    let tau2 = (EDITION_LEVEL_PRIOR_WEIGHT * EDITION_LEVEL_SD.powi(2) + df * measured)
        / (EDITION_LEVEL_PRIOR_WEIGHT + df);
    let (beta, sd, _) = response_map(&cells, instances, prior, Some(beta), tau2);
    Response {
        relative: beta,
        sd,
        instances,
        spread: tau2.sqrt(),
    }
}

/// The MAP of `beta` and the editions' level deviations `u` (prior sd `sqrt(tau2)`; all
/// held at 0 when `tau2` is 0) under [`learn_response`]'s model, by Newton's method on
/// the concave log posterior, from `start`. Returns `beta`, its posterior sd and `u`.
fn response_map(
    cells: &[Vec<Cell>],
    instances: usize,
    prior: Response,
    start: Option<f64>,
    tau2: f64,
) -> (f64, f64, Vec<f64>) {
    let (b0, inv_vb) = (prior.relative, 1.0 / prior.sd.max(1e-6).powi(2));
    let (b_min, b_max) = (0.05 * b0, 20.0 * b0);
    // Parameters: beta, then u_j when the editions may differ.
    let n = if tau2 > 0.0 { 1 + instances } else { 1 };
    let inv_vu = if tau2 > 0.0 { 1.0 / tau2 } else { 0.0 };
    let mut theta = vec![0.0; n];
    theta[0] = start.unwrap_or(b0).clamp(b_min, b_max);
    let mut hessian = vec![vec![0.0; n]; n];
    let mut gradient = vec![0.0; n];
    for _ in 0..50 {
        for row in hessian.iter_mut() {
            row.iter_mut().for_each(|v| *v = 0.0);
        }
        gradient.iter_mut().for_each(|v| *v = 0.0);
        let beta = theta[0];
        for bin in cells {
            let total: f64 = bin.iter().map(|c| c.units).sum();
            let eta = |c: &Cell| {
                let u = if n > 1 { theta[1 + c.instance] } else { 0.0 };
                (u - beta * c.x).clamp(-50.0, 50.0)
            };
            let peak = bin.iter().map(eta).fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = bin
                .iter()
                .map(|c| c.observed * (eta(c) - peak).exp())
                .collect();
            let sum: f64 = weights.iter().sum();
            // d eta / d beta = -x; d eta / d u_j = 1.
            let mean_x: f64 = bin.iter().zip(&weights).map(|(c, w)| w / sum * -c.x).sum();
            for (c, w) in bin.iter().zip(&weights) {
                let pi = w / sum;
                let z = -c.x;
                let residual = c.units - total * pi;
                gradient[0] += z * residual;
                hessian[0][0] -= total * pi * z * (z - mean_x);
                if n > 1 {
                    let j = 1 + c.instance;
                    gradient[j] += residual;
                    hessian[0][j] -= total * pi * (z - mean_x);
                    hessian[j][0] = hessian[0][j];
                    hessian[j][j] -= total * pi;
                    for (d, w2) in bin.iter().zip(&weights) {
                        hessian[j][1 + d.instance] += total * pi * w2 / sum;
                    }
                }
            }
        }
        gradient[0] -= (theta[0] - b0) * inv_vb;
        hessian[0][0] -= inv_vb;
        for j in 1..n {
            gradient[j] -= theta[j] * inv_vu;
            hessian[j][j] -= inv_vu;
        }
        let Some(step) = solve_negative(&hessian, &gradient) else {
            break;
        };
        let next = (theta[0] + step[0].clamp(-1.0, 1.0)).clamp(b_min, b_max);
        let moved = (next - theta[0]).abs();
        theta[0] = next;
        for j in 1..n {
            theta[j] += step[j].clamp(-1.0, 1.0);
        }
        if moved < 1e-6 && step.iter().skip(1).all(|s| s.abs() < 1e-6) {
            break;
        }
    }
    // The posterior variance of beta: the first diagonal element of (-H)^-1.
    let mut unit = vec![0.0; n];
    unit[0] = 1.0;
    let sd = solve_negative(&hessian, &unit)
        .map(|v| v[0].max(0.0).sqrt())
        .filter(|v| v.is_finite() && *v > 0.0)
        .unwrap_or(prior.sd);
    (theta[0], sd.min(prior.sd), theta[1..].to_vec())
}

/// Solves `(-h) x = g` for a symmetric negative definite `h` (Cholesky); `None` when it
/// is not.
fn solve_negative(h: &[Vec<f64>], g: &[f64]) -> Option<Vec<f64>> {
    let n = g.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let dot: f64 = l[i][..j].iter().zip(&l[j][..j]).map(|(a, b)| a * b).sum();
            let sum = -h[i][j] - dot;
            if i == j {
                if !(sum > 0.0 && sum.is_finite()) {
                    return None;
                }
                l[i][i] = sum.sqrt();
            } else {
                l[i][j] = sum / l[j][j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        let dot: f64 = l[i][..i].iter().zip(&y[..i]).map(|(a, b)| a * b).sum();
        y[i] = (g[i] - dot) / l[i][i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let dot: f64 = (i + 1..n).map(|k| l[k][i] * x[k]).sum();
        x[i] = (y[i] - dot) / l[i][i];
    }
    Some(x)
}

/// The elapsed share up to which an instance's sales tell demand: its sell-out or how far
/// it had come when it was read, whichever is first.
fn read_end(p: &PastSales) -> f64 {
    let end = p.read_until.clamp(0.0, 1.0);
    p.sold_out_at
        .map_or(end, |out| out.clamp(0.0, 1.0).min(end))
}

/// The observed fraction of each bin: 1 before [`read_end`], the part before it in its
/// bin, 0 after it.
fn observed(p: &PastSales) -> [f64; CURVE_BINS] {
    let mut observed = [1.0; CURVE_BINS];
    let x = read_end(p) * CURVE_BINS as f64;
    for (k, o) in observed.iter_mut().enumerate() {
        *o = (x - k as f64).clamp(0.0, 1.0);
    }
    observed
}

/// The relative price each bin of `p` sold at (`observed`: [`observed`] of `p`); a bin
/// without sales is taken at the instance's mean relative price.
fn relative_prices(p: &PastSales, observed: &[f64; CURVE_BINS]) -> [f64; CURVE_BINS] {
    let (mut paid, mut sold) = (0.0, 0.0);
    for (k, &o) in observed.iter().enumerate() {
        if read_bin(p, k, o) {
            paid += p.relative[k];
            sold += p.bins[k];
        }
    }
    let mean = if sold > 0.0 { paid / sold } else { 1.0 };
    let mut r = [mean; CURVE_BINS];
    for (k, &o) in observed.iter().enumerate() {
        if read_bin(p, k, o) {
            r[k] = p.relative[k] / p.bins[k];
        }
    }
    r
}

/// Whether the units of bin `k` are read: units in a bin not read at all (the sale that
/// sold out at its very start) would be demand without exposure.
fn read_bin(p: &PastSales, k: usize, o: f64) -> bool {
    p.bins[k] > 0.0 && o > 0.0
}

/// One past instance as [`fit_curve`] reads it, per bin: units, the price's factor on the
/// demand ([`logistic_response`]), the observed fraction.
type Row = ([f64; CURVE_BINS], [f64; CURVE_BINS], [f64; CURVE_BINS]);

/// [`learn`]'s curve, with the relative price response `beta`.
fn fit_curve(rows: &[&PastSales], beta: f64) -> Curve {
    let prior = Curve::prior();
    let data: Vec<Row> = rows
        .iter()
        .map(|p| {
            let observed = observed(p);
            let relative = relative_prices(p, &observed);
            let (mut units, mut factor) = ([0.0; CURVE_BINS], [0.0; CURVE_BINS]);
            for (k, &o) in observed.iter().enumerate() {
                // Read at the default prices when the record keeps them, else at the
                // bin's mean relative price.
                match &p.at_default {
                    Some(at_default) => {
                        if read_bin(p, k, o) {
                            units[k] = at_default[k];
                        }
                        factor[k] = 1.0;
                    }
                    None => {
                        if read_bin(p, k, o) {
                            units[k] = p.bins[k];
                        }
                        factor[k] = logistic_response(beta, relative[k]);
                    }
                }
            }
            (units, factor, observed)
        })
        .collect();
    let read = data
        .iter()
        .filter_map(|(_, _, o)| o.iter().rposition(|&f| f > 0.0))
        .max()
        .unwrap_or(CURVE_BINS - 1);
    let mut g = prior.bins.clone();
    let mut levels = vec![0.0; data.len()];
    for _ in 0..25 {
        for (j, (units, factor, observed)) in data.iter().enumerate() {
            let seen: f64 = (0..CURVE_BINS)
                .map(|k| g[k] * factor[k] * observed[k])
                .sum();
            let units: f64 = units.iter().sum();
            levels[j] = if seen > 0.0 { units / seen } else { 0.0 };
        }
        let mut next = vec![0.0; CURVE_BINS];
        for (k, slot) in next.iter_mut().enumerate() {
            let mut sold = CURVE_PRIOR_UNITS * prior.bins[k];
            let mut exposure = CURVE_PRIOR_UNITS;
            for (j, (units, factor, observed)) in data.iter().enumerate() {
                sold += units[k];
                exposure += levels[j] * factor[k] * observed[k];
            }
            *slot = sold / exposure;
        }
        // The density of the last bins read (three: one partly read bin is noisy).
        let last = &next[read.saturating_sub(2)..=read];
        let floor = last.iter().sum::<f64>() / last.len() as f64;
        for v in next.iter_mut().skip(read + 1) {
            *v = v.max(floor);
        }
        g = Curve::normalised(next).bins;
    }
    Curve::new(g)
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
    /// The price response relative to the default price (`b * d`).
    pub relative_response: f64,
    /// Standard deviation of the price response, relative to its prior.
    pub response_sd: f64,
    /// The relative price less 1 at which `level` was seen (0: at the default, the
    /// user's belief). `level_sd` is the uncertainty of the demand at that price; the
    /// level at the default follows from it with the price response, so an error of the
    /// response moves the level at the default and not the demand where it was seen.
    pub pivot: f64,
}

impl Prior {
    /// The prior price response `b`.
    pub fn response(&self) -> f64 {
        self.relative_response / self.default.max(1e-6)
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
///
/// Newton's method on a strictly concave objective: its maximum does not depend on where
/// it starts, so it starts at `start` when given (the previous calculation's estimate:
/// an hour adds a few sales, and one or two steps reach it again), else at the prior. It
/// stops after a step that moved the level and the price response by less than 1 %
/// (Newton converges quadratically: the error left is of the order of the step squared,
/// 1e-4 at most and about 1e-6 measured, well under a price step), also when the price
/// response rests on a bound of its range (it no longer moves; the level then takes its
/// own Newton step).
pub fn fit(
    prior: &Prior,
    sales: &SalesStats,
    exposure: &Exposure,
    evidence: f64,
    start: Option<Estimate>,
) -> Estimate {
    let d = prior.default.max(1e-6);
    let (a0, b0) = (prior.level.max(1e-6).ln(), prior.response());
    let (inv_va, inv_vb) = (
        1.0 / (prior.level_sd * prior.level_sd),
        1.0 / (prior.response_sd * b0).powi(2),
    );
    let (b_min, b_max) = (0.02 * b0, 50.0 * b0);
    let w = evidence.clamp(0.0, 1.0);
    // The level's prior is on the demand where it was seen, at the pivot price
    // `d + x_star`: on `log A - b * x_star` (a prior on `log A` and `b` correlated
    // through it).
    let x_star = prior.pivot * d;
    let n = sales.units as f64;
    // Sum over units of (price paid - default).
    let s = sales.paid - n * d;
    let (mut a, mut b) = match start {
        Some(e) if e.level > 0.0 && e.level.is_finite() && e.response.is_finite() => {
            (e.level.ln(), e.response.clamp(b_min, b_max))
        }
        _ => (a0, b0),
    };
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
        let c = (a - a0) - x_star * (b - b0);
        let ga = w * (n - ea * f) - c * inv_va;
        let gb = w * (-s - ea * fb) + x_star * c * inv_va - (b - b0) * inv_vb;
        let haa = -w * ea * f - inv_va;
        let hab = -w * ea * fb + x_star * inv_va;
        let hbb = -w * ea * fbb - x_star * x_star * inv_va - inv_vb;
        let det = haa * hbb - hab * hab;
        if !(det > 0.0 && det.is_finite()) {
            break;
        }
        // Newton step on a concave objective, with the step kept sane.
        let db = (-(haa * gb - hab * ga) / det).clamp(-0.5 * b, 0.5 * b);
        let next = (b + db).clamp(b_min, b_max);
        // With the response held at a bound, the level's own Newton step.
        let da = if next == b + db {
            -(hbb * ga - hab * gb) / det
        } else {
            -ga / haa
        }
        .clamp(-1.0, 1.0);
        let moved = (next - b).abs();
        a += da;
        b = next;
        if da.abs() < 1e-2 && moved < 1e-2 * b {
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
