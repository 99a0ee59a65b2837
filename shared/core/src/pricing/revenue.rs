//! The `revenue` model: learns each item's demand from the sales the service sees and
//! re-solves the product's remaining problem at every calculation (docs/pricing.md).
//!
//! For a product with `units_left` units shared by its items, item `i` at price `p` is
//! expected to sell `D_i(p) = A_i * R_i * exp(-b_i * (p - d_i))` over the rest of its
//! period (`R_i`: the share of the booking curve still to come). The fluid re-solve picks
//! the bid price `lambda >= 0` (the marginal value of a unit of capacity) and prices every
//! item at `p_i = clamp(lambda + 1 / b_i, min_i, max_i)`, the price that maximises
//! `(p - lambda) * D_i(p)`: with capacity to spare `lambda = 0` and each item sits at its
//! revenue-maximising price; when the believed demand exceeds the units left, `lambda`
//! rises until it does not. Estimates come from [`demand::fit`]; the curve and the prior
//! demand level from the project's past instances ([`ProjectHistory`]), else the curve
//! the instance's own sales show so far ([`demand::own_shape`], flat until they show
//! otherwise) and the user's `expectedSales` — and then the model cuts below the default
//! price only as far as the user's belief calls for, the sales do not contradict, and
//! [`uninformed_cut`] allows (early on, a late surge and weak demand look alike), and
//! reads a surge from the item's recent pace ([`Pace`]): buyers coming faster than the
//! estimate expects add to the remaining demand for twice as long as they have.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::demand::{self, Curve, Estimate, Exposure, Learned, Pace, PastSales, Prior};
use super::explain::{ModelExplanation, ModelNote};
use super::models::elapsed_share;
use crate::ids::{ItemId, ProductId};
use crate::money::Money;
use crate::state::{InstanceState, ItemState, ProductState};
use crate::time::Timestamp;

/// Standard deviation of log(level) in the prior: demand 40 % off the user's belief is
/// within one sd.
const LEVEL_SD: f64 = 0.5;
/// Standard deviation of the price response, relative to the prior response.
const RESPONSE_SD: f64 = demand::PRIOR_RESPONSE_SD;
/// The weight of the data against a booking curve that is only the prior: a late surge
/// and weak demand look alike early, so a prior curve's reading of the data is trusted
/// less (see docs/pricing.md).
const EVIDENCE_ON_PRIOR_CURVE: f64 = 0.35;

/// The deepest cut below the default price the model makes while the booking curve is only
/// the prior and the user expects to sell most of the capacity (deeper below that: see
/// [`uninformed_cut`]). The cut rests on the prior price response (b * d = 1.5), which no sale at a
/// single price can confirm; if the user's default was already the revenue-maximising
/// price (b * d = 1), a cut by c earns (1 - c) * e^c of the default's revenue, about
/// 1 - c^2 / 2: at 11 % that is 0.6 % less. Where the capacity binds instead (the user's
/// belief too low, and buyers who come late, so that the early sales agree with it), each
/// point of the cut is lost on every unit sold before the buyers show: 12 % cost 1.1 points
/// against the fixed default there, 11 % 0.9 (docs/pricing.md).
const UNINFORMED_CUT: f64 = 0.11;

/// The shares of the capacity the user expects to sell at the default price between which
/// the cut allowed without history deepens, from [`UNINFORMED_CUT`] to the whole cut the
/// prior response calls for (see [`uninformed_cut`]).
const SMALL_BELIEF: (f64, f64) = (0.6, 0.2);

/// The deepest cut below the default the model makes without history when the user
/// expects to sell `believed_share` of the capacity at the default price: [`UNINFORMED_CUT`]
/// from 60 % up, the whole cut to the prior's revenue-maximising price (a third below the
/// default, `1 / b` at `b * d = 1.5`) at 20 % and below, in proportion between. Capacities
/// are sized to the demand at a sensible price: a user who expects to sell a small share
/// of it at the default has priced in the upper tail of what buyers will pay, where they
/// respond to price more steeply than the prior says, not less (docs/pricing.md).
fn uninformed_cut(believed_share: f64) -> f64 {
    let (shallow, deep) = SMALL_BELIEF;
    let depth = ((shallow - believed_share) / (shallow - deep)).clamp(0.0, 1.0);
    let whole = 1.0 - 1.0 / demand::PRIOR_RELATIVE_RESPONSE;
    UNINFORMED_CUT + depth * (whole - UNINFORMED_CUT)
}

/// The change per calculation the revenue model allows itself when the product sets no
/// `maxStepChange`: 25 % of the previous price. The model re-solves from scratch each
/// time, so a new estimate (a burst of sales, a sibling instance's history) could move a
/// price by half or double in one step; capped, it gets there over a few calculations
/// (hourly by default), which buyers and the user can follow. The suite's markets price
/// the same with it (docs/pricing.md). A product's own `maxStepChange` replaces it.
pub const DEFAULT_MAX_STEP_CHANGE: f64 = 0.25;

/// Where a product's booking curve comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CurveSource {
    /// Learned from this product in the project's past instances.
    Learned,
    /// Learned from the project's other products (no past sales of this one).
    Project,
    /// A new project: the curve the instance's own sales show so far (flat before they
    /// show a shape).
    #[default]
    Prior,
}

/// Booking curves learned from a project's past instances.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectHistory {
    products: BTreeMap<ProductId, Learned>,
    pooled: Option<Learned>,
}

impl ProjectHistory {
    /// Learns the curves from the final (or current) states of the project's other
    /// instances at `now`, adjusted for the prices they charged and censored after a
    /// sell-out and, for an instance still selling, after `now`.
    pub fn learn<'a>(
        past: impl IntoIterator<Item = &'a InstanceState>,
        now: Timestamp,
    ) -> ProjectHistory {
        ProjectHistory::from_products(past.into_iter().flat_map(|s| s.products.values()), now)
    }

    /// Learns the curves at `now` from product records of the project's other instances
    /// (each keeps its sales per share of its period: see `ProductSales`). An instance
    /// still selling at `now` (a festival's other day) is read up to where it is: what it
    /// has not reached yet is unknown, not no demand.
    pub fn from_products<'a>(
        products: impl IntoIterator<Item = &'a ProductState>,
        now: Timestamp,
    ) -> ProjectHistory {
        let mut by_product: BTreeMap<ProductId, Vec<PastSales>> = BTreeMap::new();
        for p in products {
            let sales = PastSales::of_product(&p.demand, p.properties.capacity, p.reserved, now);
            by_product
                .entry(p.product_id.clone())
                .or_default()
                .push(sales);
        }
        let all: Vec<PastSales> = by_product.values().flatten().cloned().collect();
        ProjectHistory {
            products: by_product
                .into_iter()
                .filter_map(|(id, sales)| demand::learn(&sales).map(|c| (id, c)))
                .collect(),
            pooled: demand::learn_pooled(&all),
        }
    }

    /// The curve for `product`, and where it comes from.
    pub fn curve(&self, product: &ProductId) -> (Curve, CurveSource) {
        match (self.products.get(product), &self.pooled) {
            (Some(l), _) => (l.curve.clone(), CurveSource::Learned),
            (None, Some(l)) => (l.curve.clone(), CurveSource::Project),
            (None, None) => (Curve::prior(), CurveSource::Prior),
        }
    }

    /// What the past instances of `product` showed, when it has any.
    pub fn learned(&self, product: &ProductId) -> Option<&Learned> {
        self.products.get(product)
    }

    pub fn is_empty(&self) -> bool {
        self.pooled.is_none()
    }
}

/// What the previous calculation left: when it ran, each item's price and exposure.
#[derive(Debug, Clone, Copy)]
pub struct Previous<'a> {
    pub at: Option<Timestamp>,
    pub prices: &'a BTreeMap<ItemId, Money>,
    pub exposures: &'a BTreeMap<ItemId, Exposure>,
}

/// One live item of a revenue-model product, with what the previous calculation left for
/// it (the engine walks the previous calculation alongside the items, in item id order).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemInput<'a> {
    pub item: &'a ItemState,
    pub previous_price: Option<Money>,
    pub carried: Option<&'a Exposure>,
}

/// The revenue model's plan for one item, solved once per calculation with its product.
#[derive(Debug, Clone)]
pub(crate) struct ItemPlan {
    /// The model price (before maxStepChange, bounds and rounding).
    price: f64,
    explanation: ModelExplanation,
    exposure: Exposure,
}

impl ItemPlan {
    /// The model price of `item` as a multiplier of `default * multiplier`, its
    /// explanation, and its exposure to carry forward.
    pub(crate) fn into_model(self, item: &ItemState) -> (f64, ModelExplanation, Exposure) {
        let ps = &item.properties.price_settings;
        let base = ps.default.to_f64() * ps.multiplier;
        let m = if base > 0.0 { self.price / base } else { 1.0 };
        (m, self.explanation, self.exposure)
    }

    /// The exposure to carry forward, for an item the calculation kept.
    pub(crate) fn into_exposure(self) -> Exposure {
        self.exposure
    }
}

/// One item's market as the solve sees it.
#[derive(Debug, Clone, Copy)]
struct Market {
    estimate: Estimate,
    default: f64,
    /// The lowest model price: the item's min, or a floor while the booking curve is only
    /// the prior (see [`cut_floors`]).
    min: f64,
    max: f64,
    /// Share of the booking curve still to come.
    remaining: f64,
    /// The units the item itself has left when it has its own total in circulation
    /// (`itemQuantity`: the total less its sold and reserved): it sells no more than these,
    /// whatever its product has left.
    left: Option<f64>,
}

impl Market {
    /// The units the item is expected to sell from now on at `price`: the believed demand,
    /// at most the units it has left.
    fn sales_at(&self, price: f64) -> f64 {
        let demand = self.estimate.demand(self.default, self.remaining, price);
        self.left.map_or(demand, |left| demand.min(left))
    }

    /// The lowest price at which the believed demand fits the item's own units left (none
    /// without a total, or when its demand fits them at any price): below it the item
    /// would turn buyers away at a price it could raise for free.
    fn own_floor(&self) -> Option<f64> {
        let left = self.left?;
        if left <= 0.0 {
            return Some(f64::INFINITY);
        }
        let at_default = self
            .estimate
            .demand(self.default, self.remaining, self.default);
        (at_default > left)
            .then(|| self.default + (at_default / left).ln() / self.estimate.response.max(1e-12))
    }
}

impl AsRef<Market> for Market {
    fn as_ref(&self) -> &Market {
        self
    }
}

/// One item's inputs to the solve.
struct Solving<'a> {
    item: &'a ItemState,
    market: Market,
    /// The prior level of the fit (units over the whole period at the default price).
    believed: f64,
    /// The price the previous calculation set.
    previous: Option<f64>,
    tau: f64,
    exposure: Exposure,
    /// Share of the booking curve still to come.
    demand_left: f64,
    /// How much faster than expected buyers came lately ([`Pace::factor`]; 1 when not).
    pace: f64,
}

/// Learns and solves for the live items of `product`: one plan per item, in the order
/// of `items`. `previous_at` is when the previous calculation ran.
pub(crate) fn plan_product(
    items: &[ItemInput<'_>],
    product: &ProductState,
    capacity: Option<u64>,
    committed: u64,
    previous_at: Option<Timestamp>,
    history: &ProjectHistory,
    now: Timestamp,
) -> Vec<ItemPlan> {
    let (curve, source) = history.curve(&product.product_id);
    let Some(capacity) = capacity.filter(|c| *c > 0) else {
        let note = if capacity.is_none() {
            ModelNote::NoCapacity
        } else {
            ModelNote::ZeroCapacity
        };
        return fallback(items, note, previous_at, &curve, now);
    };
    let units_left = capacity.saturating_sub(committed);
    // A new project has no curve learned: its instance's own sales show how demand
    // rises toward the event so far (flat until they show otherwise).
    let curve = if source == CurveSource::Prior {
        Curve::power(product.demand.own_shape(now))
    } else {
        curve
    };
    let evidence = match source {
        CurveSource::Prior => EVIDENCE_ON_PRIOR_CURVE,
        CurveSource::Learned | CurveSource::Project => 1.0,
    };
    // The level and the price response the product's past instances showed (the level at
    // the prices they sold at: the pivot), else what the user expects (at the default)
    // and the prior response. The product record sums its items' sales: a product of
    // several items splits the level among them as the instances sold them (equally
    // without that), and each item starts from the product's response and learns its own
    // from its price moves.
    let learned = history.learned(&product.product_id);
    let (believed, level_sd, pivot, relative_response, response_sd) = match learned {
        Some(l) => (
            l.level,
            l.level_sd,
            l.distance,
            l.response.relative,
            l.response.sd / l.response.relative,
        ),
        None => (
            product.properties.expected_sales * capacity as f64,
            LEVEL_SD,
            0.0,
            demand::PRIOR_RELATIVE_RESPONSE,
            RESPONSE_SD,
        ),
    };
    let shares = learned
        .and_then(|l| l.item_shares(items.iter().map(|i| &i.item.item_id)))
        .unwrap_or_else(|| vec![1.0 / items.len().max(1) as f64; items.len()]);
    let mut solving: Vec<Solving<'_>> = items
        .iter()
        .zip(&shares)
        .map(|(input, share)| {
            let item = input.item;
            let ps = &item.properties.price_settings;
            let default = ps.default.to_f64().max(1e-6);
            let tau = elapsed_share(&item.properties.sales_period, now);
            let mut exposure = exposure_now(
                input,
                previous_at,
                &curve,
                source == CurveSource::Prior,
                tau,
            );
            let prior = Prior {
                level: (believed * share).max(0.5),
                default,
                level_sd,
                relative_response,
                response_sd,
                pivot,
            };
            let start = input.carried.and_then(|c| c.estimate);
            // Buyers coming faster than the estimate expects, for as long as that is
            // taken to last: read only against the prior curve (a learned one expects
            // its surges; there the pace adds noise and nothing else).
            let (pace, lasting) = match &exposure.pace {
                Some(p) if source == CurveSource::Prior => (p.factor(), p.horizon(tau)),
                _ => (1.0, 0.0),
            };
            let mut estimate = demand::fit(&prior, &item.demand, &exposure, evidence, start);
            // While buyers come faster than the curve believed, the sales tell more demand,
            // not how buyers respond to price: the surge meets the price set before it
            // (often a cut below the default), and the fit would read its many units at
            // that price as a steep response and cut again. The response stays where it
            // was until the pace passes (docs/pricing.md, "A surge without history").
            if let Some(e) = start.filter(|_| pace > 1.0) {
                estimate.response = e.response;
            }
            exposure.estimate = Some(estimate);
            let remaining = 1.0 - curve.cumulative(tau);
            // An item whose base price is 0 (a free item, or a multiplier of 0) is not the
            // model's to price: the pipeline gives it its min whatever the plan says. The
            // solve reads it there (its buyers take it, their number the bid price cannot
            // move); a free one at the smallest default above 0, where its response is
            // read from (read at 0, that default's response of 1.5 / 1e-6 had its buyers
            // take a free ticket 4.5 times as often).
            let (min, max) = if ps.default.to_f64() * ps.multiplier > 0.0 {
                (ps.min.to_f64(), ps.max.to_f64())
            } else {
                let at = ps.min.to_f64().max(default - ps.default.to_f64());
                (at, at)
            };
            Solving {
                item,
                market: Market {
                    estimate,
                    default,
                    min,
                    max,
                    remaining: remaining + (pace - 1.0) * curve.mass(tau, tau + lasting),
                    left: item
                        .total
                        .map(|t| t.saturating_sub(item.sold.saturating_add(item.reserved)) as f64),
                },
                demand_left: remaining,
                pace,
                believed: prior.level,
                previous: input.previous_price.map(|p| p.to_f64()),
                tau,
                exposure,
            }
        })
        .collect();
    // A default far above the market: once the product has sold nothing though the
    // user's belief expects 15 units by now, the cut floors (which rest on that belief)
    // no longer hold it, and its prices step down while the sales stay far short of the
    // belief (see [`Shortfall`]).
    let mut descending = false;
    if source == CurveSource::Prior {
        // A product with no unit left is not tested (nothing it could sell is missing).
        let shortfall =
            (units_left > 0).then(|| Shortfall::of(&solving, product, believed, units_left));
        let released = solving.iter().any(|s| s.exposure.released)
            || shortfall.as_ref().is_some_and(Shortfall::nothing_sold);
        descending = released && shortfall.is_some_and(|s| s.refutes(DESCENT_SHARE));
        if released {
            for s in &mut solving {
                s.exposure.released = true;
            }
        } else {
            let floors = cut_floors(&solving, capacity as f64, units_left as f64);
            for (s, floor) in solving.iter_mut().zip(floors) {
                s.market.min = s.market.min.max(floor);
            }
        }
    }
    let (bid_price, expected) = solve(&solving, units_left as f64);
    let step = product.properties.rounding.step.to_f64();
    solving
        .into_iter()
        .map(|s| {
            let m = &s.market;
            let mut price = item_price(m, bid_price);
            // From a previous price of 0 nothing steps down (as maxStepChange caps
            // nothing from 0).
            if let Some(previous) = s.previous.filter(|p| descending && *p > 0.0) {
                let ps = &s.item.properties.price_settings;
                let lowest = DESCENT_FLOOR * ps.default.to_f64() * ps.multiplier;
                price = descended(price, previous, lowest, step, m.min);
            }
            let explanation = ModelExplanation::Revenue(Box::new(RevenueExplanation {
                demand_level: m.estimate.level,
                price_response: m.estimate.response,
                units_left,
                time_left: 1.0 - s.tau,
                demand_left: s.demand_left,
                recent_pace: s.pace,
                remaining_demand: m.sales_at(price),
                bid_price,
                // Sales, not demand: no more than the units left (the demand at these
                // prices may be more, when a price held by its bounds sells more than the
                // capacity has: `sellsOut` says so).
                expected_sales: expected.min(units_left as f64),
                sells_out: expected >= units_left as f64 - 0.5,
                units_observed: s.item.demand.units,
                demand_observed: s.exposure.mass(),
                curve: source,
                // Said only while the curve is the prior (a learned curve prices without
                // floors anyway; the flag stays on the exposure all the same).
                belief_refuted: source == CurveSource::Prior && s.exposure.released,
                note: None,
            }));
            ItemPlan {
                price,
                explanation,
                exposure: s.exposure,
            }
        })
        .collect()
}

impl AsRef<Market> for Solving<'_> {
    fn as_ref(&self) -> &Market {
        &self.market
    }
}

/// The cumulative share of demand by elapsed share `tau` that the cut floor reads sales
/// against: `tau^1.5`, a curve that rises toward the event (pace's own assumption).
fn back_loaded_cumulative(tau: f64) -> f64 {
    tau.clamp(0.0, 1.0).powf(1.5)
}

/// How the product's sales so far compare with the user's belief (`expectedSales` at the
/// default prices), read against a back-loaded curve (the reading that expects the fewest
/// so far).
///
/// Demand 40 % below the belief, or a market smaller than the user thought, sells a share
/// of it, and a late surge reads as weak demand early on: the cut floors are for those.
/// A default that no buyer pays sells nothing, and there the floors held the price near
/// the default for good (nothing sold in a market of buyers paying 20 to 100 with the
/// default at 120, in any edition). So a product that has sold nothing at all while the
/// belief expects at least [`REFUTING_EXPECTED`] units by now (no sale is then a chance
/// of 3 in 10 million) is released from the floors for the rest of the instance (the
/// flag rides on each item's exposure; a later change of the default or the belief
/// does not undo it), and while its sales stay under [`DESCENT_SHARE`] of the belief,
/// beyond chance, each calculation also takes its prices [`DESCENT_STEP`] (and at least
/// one rounding step) below the previous ones, down to [`DESCENT_FLOOR`] of the default:
/// the fit alone, anchored on a belief about the default, climbed back toward it as the
/// first few sales came in (docs/pricing.md, "A default above the market").
struct Shortfall {
    /// Units the product's items bought so far.
    sold: u64,
    /// Units the belief expects by now.
    expected: f64,
}

impl Shortfall {
    /// The product's units bought so far, and what the belief (`believed` units over the
    /// period at the defaults, the product's, split equally among its live items as the
    /// fit's prior splits it, each at most the item's total in circulation when known)
    /// expects by now, of no more than the units the product has sold and can still sell
    /// (its reservations take the rest). A removed item's units still count (the product
    /// record keeps them): the belief is the whole product's.
    fn of(
        items: &[Solving<'_>],
        product: &ProductState,
        believed: f64,
        units_left: u64,
    ) -> Shortfall {
        let live = items
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.item.demand.units));
        let all = product
            .demand
            .bins
            .iter()
            .fold(0u64, |sum, u| sum.saturating_add(*u));
        let sellable = units_left as f64 + product.demand.net_sold.max(0) as f64;
        // A product's items usually share their sales period: its reading is computed once.
        let mut last = (f64::NAN, 0.0);
        let mut read = |tau: f64| {
            if tau != last.0 {
                last = (tau, back_loaded_cumulative(tau));
            }
            last.1
        };
        let each = believed.min(sellable) / items.len().max(1) as f64;
        // Only over what the service has seen: an item registered mid-sale whose earlier
        // sales were never sent sold nothing the service knows of, and that says nothing
        // about the default (read from the period's start, the first calculation of such
        // an item priced it at its min).
        let expected = items
            .iter()
            .map(|s| {
                let seen =
                    read(s.tau) - back_loaded_cumulative(s.exposure.observed_from.unwrap_or(0.0));
                s.item.total.map_or(each, |t| each.min(t as f64)) * seen.max(0.0)
            })
            .sum();
        Shortfall {
            sold: live.max(all),
            expected,
        }
    }

    /// No unit sold at all, though the belief expects [`REFUTING_EXPECTED`] by now.
    fn nothing_sold(&self) -> bool {
        self.sold == 0 && self.expected >= REFUTING_EXPECTED
    }

    /// Whether the sales are under `share` of the belief, beyond chance ([`REFUTED_P`]),
    /// once it expects [`REFUTING_EXPECTED`] units.
    fn refutes(&self, share: f64) -> bool {
        self.expected >= REFUTING_EXPECTED
            && (self.sold as f64) < share * self.expected
            && poisson_lower_tail(self.sold, self.expected) < REFUTED_P
    }
}

/// The model price `price` of a descending item whose previous price was `previous`:
/// [`DESCENT_STEP`] below it (at least one rounding `step`: 5 % of a price under ten
/// steps would round back up), not below `lowest` (the descent's floor) by the descent
/// itself, never above `previous` (a previous price already under the floor, the fit's
/// own, caps too), lower where the fit's own price is, and not under `min`.
fn descended(price: f64, previous: f64, lowest: f64, step: f64, min: f64) -> f64 {
    let down = (previous * (1.0 - DESCENT_STEP)).min(previous - step);
    price.min(down.max(lowest.min(previous))).max(min)
}

/// The units the belief must expect by now before no sale at all releases a product from
/// the cut floors (and before its sales can keep it descending): with fewer, a slow start
/// of buyers who come late, or of a market smaller than the user thought, looks the same.
const REFUTING_EXPECTED: f64 = 15.0;
/// The share of the belief under which a released product's prices keep stepping down.
const DESCENT_SHARE: f64 = 0.35;
/// How far below the previous price each calculation takes a descending product's prices.
const DESCENT_STEP: f64 = 0.05;
/// The lowest price the descent itself takes an item to, as a share of its default (times
/// its multiplier): sales far short of the belief may also mean a market smaller than the
/// user thought, where a deep cut only gives the margin away (in markets of a belief 16
/// times the demand, a descent to the item's min lost 8 to 22 points against the fixed
/// default: docs/pricing.md); below it only the fit's own price goes.
const DESCENT_FLOOR: f64 = 0.7;
/// The chance under which [`Shortfall`] takes the shortfall to be more than luck.
const REFUTED_P: f64 = 1e-3;

/// P(X <= k) for X Poisson of mean `mean` (1 for `k` at or above the mean, where nothing
/// is refuted). The terms grow toward `k`, so they are summed from `k` down, each
/// `i / mean` times the one after it; `ln k!` is Stirling's series beyond 256 terms.
fn poisson_lower_tail(k: u64, mean: f64) -> f64 {
    let kf = k as f64;
    if mean.is_nan() || mean <= kf || mean.is_infinite() {
        return 1.0;
    }
    let ln_factorial = if k <= 256 {
        (2..=k).map(|i| (i as f64).ln()).sum::<f64>()
    } else {
        kf * kf.ln() - kf + 0.5 * (2.0 * std::f64::consts::PI * kf).ln() + 1.0 / (12.0 * kf)
    };
    let ln_last = -mean + kf * mean.ln() - ln_factorial;
    let (mut sum, mut term, mut i) = (1.0, 1.0, kf);
    while i >= 1.0 && term > 1e-12 * sum {
        term *= i / mean;
        sum += term;
        i -= 1.0;
    }
    (ln_last + sum.ln()).exp().min(1.0)
}

/// How far each item may go below its default price while the booking curve is only the
/// prior (a new project). Early on a late surge and weak demand look alike, so a cut must
/// not rest on sales running behind a flat curve. A cut needs two things:
/// - the user's belief calls for it: the price that sells the capacity (or maximises
///   revenue) over the whole period if demand is what `expectedSales` says, at the prior
///   price response;
/// - the sales do not contradict it: the re-solve of what is left, with the demand the
///   sales show read against a back-loaded curve (a reading that finds more demand still
///   to come than the flat one), calls for it too.
///
/// The floor is the higher of the two prices and of the default less [`uninformed_cut`]
/// (11 %, deeper when the user expects to sell a small share of the capacity), and never
/// above the default price.
fn cut_floors(items: &[Solving<'_>], capacity: f64, units_left: f64) -> Vec<f64> {
    let believed: Vec<Market> = items
        .iter()
        .map(|s| Market {
            estimate: Estimate {
                level: s.believed,
                ..s.market.estimate
            },
            remaining: 1.0,
            left: s.item.total.map(|t| t as f64),
            ..s.market
        })
        .collect();
    let shown: Vec<Market> = items
        .iter()
        .map(|s| {
            // The fit read the sales against the curve's share so far; read them against
            // the back-loaded one when that finds more demand to come.
            let own = 1.0 - s.demand_left;
            let seen = back_loaded_cumulative(s.tau).min(own);
            let level = if seen > 0.0 {
                (s.market.estimate.level * (own / seen)).min(1e12)
            } else {
                1e12
            };
            Market {
                estimate: Estimate {
                    level,
                    ..s.market.estimate
                },
                remaining: 1.0 - seen,
                ..s.market
            }
        })
        .collect();
    let (belief_bid, _) = solve(&believed, capacity);
    let (shown_bid, _) = solve(&shown, units_left);
    let cut = uninformed_cut(items.iter().map(|s| s.believed).sum::<f64>() / capacity.max(1.0));
    items
        .iter()
        .zip(believed.iter().zip(&shown))
        .map(|(s, (b, d))| {
            let ps = &s.item.properties.price_settings;
            let base = ps.default.to_f64() * ps.multiplier;
            let floor = item_price(b, belief_bid)
                .max(item_price(d, shown_bid))
                .max(base * (1.0 - cut));
            floor.min(base)
        })
        .collect()
}

/// Without a capacity there is nothing to re-solve: default prices, exposure kept.
fn fallback(
    items: &[ItemInput<'_>],
    note: ModelNote,
    previous_at: Option<Timestamp>,
    curve: &Curve,
    now: Timestamp,
) -> Vec<ItemPlan> {
    items
        .iter()
        .map(|input| {
            let ps = &input.item.properties.price_settings;
            ItemPlan {
                price: ps.default.to_f64() * ps.multiplier,
                explanation: ModelExplanation::Revenue(Box::new(RevenueExplanation {
                    note: Some(note),
                    ..RevenueExplanation::default()
                })),
                exposure: exposure_now(
                    input,
                    previous_at,
                    curve,
                    false,
                    elapsed_share(&input.item.properties.sales_period, now),
                ),
            }
        })
        .collect()
}

/// The item's exposure up to `tau` (the elapsed share of its period now): the carried one
/// plus the curve mass since the previous calculation at the previous price (from the
/// start of the period at the previous or default price when nothing was carried). With
/// `moving` (the curve follows the instance's own sales, so it may have changed since)
/// the carried exposure is first brought to the curve's share until the previous
/// calculation, its prices' mix kept.
fn exposure_now(
    input: &ItemInput<'_>,
    previous_at: Option<Timestamp>,
    curve: &Curve,
    moving: bool,
    tau: f64,
) -> Exposure {
    let item = input.item;
    let period = &item.properties.sales_period;
    let default = item.properties.price_settings.default;
    let price = input.previous_price.unwrap_or(default).to_f64();
    let default = default.to_f64();
    match (input.carried, previous_at) {
        (Some(carried), Some(at)) => {
            // Room for the level this calculation may add (a clone has none).
            let mut levels = Vec::with_capacity(carried.levels.len() + 1);
            levels.extend_from_slice(&carried.levels);
            let from = elapsed_share(period, at);
            let mass = curve.mass(from, tau);
            let had: f64 = levels.iter().map(|(_, w)| w).sum();
            let until = curve.cumulative(from);
            if moving && had > 0.0 && until > 0.0 {
                for (_, w) in &mut levels {
                    *w *= until / had;
                }
            }
            // Without a pace (an exposure stored before it was kept) or an estimate (a
            // product priced without a capacity) nothing says what was expected: the pace
            // starts afresh, else every unit sold so far would read as a surge.
            let pace = match (&carried.pace, carried.estimate) {
                (Some(pace), Some(estimate)) => pace.advance(
                    item.demand.units,
                    estimate.demand(default, mass, price),
                    from,
                    tau,
                ),
                _ => Pace::starting(item.demand.units),
            };
            let mut exposure = Exposure {
                levels,
                estimate: carried.estimate,
                pace: Some(pace),
                released: carried.released,
                observed_from: carried.observed_from,
            };
            exposure.add(price, mass);
            exposure
        }
        _ => {
            let mut exposure = Exposure {
                pace: Some(Pace::starting(item.demand.units)),
                released: input.carried.is_some_and(|c| c.released),
                observed_from: Some(input.carried.and_then(|c| c.observed_from).unwrap_or(tau)),
                ..Exposure::default()
            };
            exposure.add(price, curve.mass(0.0, tau));
            exposure
        }
    }
}

/// The bid price and the product's expected sales at the solved prices.
///
/// The believed sales `S(lambda)` fall as the bid price rises; the bid price is where they
/// meet the units left. Newton's method on `ln S` (a log-sum of exponentials, convex in
/// `lambda` where no price is at a bound) finds it in a few evaluations; a step that would
/// leave the bracket of the root is a halving instead. It stops once a step moves `lambda`
/// by less than a millionth of `1 + lambda` (a price is exact far below any rounding step;
/// stopping at a billionth took twice the evaluations where the cut floors hold prices at
/// their bounds and the steps are halvings).
fn solve<M: AsRef<Market>>(items: &[M], units_left: f64) -> (f64, f64) {
    // The believed sales at `lambda` and their slope.
    let sales = |lambda: f64| -> (f64, f64) {
        let (mut total, mut slope) = (0.0, 0.0);
        for s in items.iter().map(AsRef::as_ref) {
            let b = s.estimate.response.max(1e-12);
            let raw = lambda + 1.0 / b;
            let price = item_price(s, lambda);
            let d = s.sales_at(price);
            total += d;
            // Where the price follows lambda: at no bound, and not held by the item's own
            // units left.
            if price == raw {
                slope -= b * d;
            }
        }
        (total, slope)
    };
    let (free, mut slope) = sales(0.0);
    if free <= units_left {
        return (0.0, free);
    }
    // Beyond the highest max every item is at its max.
    let mut hi = items.iter().map(|s| s.as_ref().max).fold(0.0, f64::max);
    let at_max = sales(hi).0;
    if at_max > units_left {
        return (hi, at_max);
    }
    let target = units_left.ln();
    let (mut lo, mut lambda, mut total) = (0.0, 0.0, free);
    for _ in 0..100 {
        // Newton on ln S(lambda) = ln(units left), kept inside (lo, hi).
        let newton = lambda - (total.ln() - target) * total / slope;
        let next = if slope < 0.0 && newton > lo && newton < hi {
            newton
        } else {
            0.5 * (lo + hi)
        };
        let step = (next - lambda).abs();
        lambda = next;
        (total, slope) = sales(lambda);
        if total > units_left {
            lo = lambda;
        } else {
            hi = lambda;
        }
        if step <= 1e-6 * (1.0 + lambda) || hi - lo <= 1e-12 * (1.0 + hi) {
            break;
        }
    }
    (lambda, total)
}

/// The price that maximises `(p - lambda) * D(p)` within the item's bounds, and no lower
/// than where its demand fits its own units left.
fn item_price(s: &Market, lambda: f64) -> f64 {
    let p = lambda + 1.0 / s.estimate.response.max(1e-12);
    let p = s.own_floor().map_or(p, |floor| p.max(floor));
    p.clamp(s.min, s.max.max(s.min))
}

/// What the revenue model used for one item's price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevenueExplanation {
    /// Estimated units the item would sell over its whole period at its default price.
    pub demand_level: f64,
    /// Estimated price response: demand falls by `exp(-priceResponse * (price - default))`.
    pub price_response: f64,
    /// Units the product has left (capacity - sold - reserved).
    pub units_left: u64,
    /// Share of the item's sales period still to come.
    pub time_left: f64,
    /// Share of the item's demand (by the booking curve) still to come.
    pub demand_left: f64,
    /// How much faster than the estimate expected buyers came lately (1: not beyond
    /// chance, or the booking curve is learned and expects its surges). The expected
    /// remaining demand counts it for twice as long as it has held.
    #[serde(default = "one")]
    pub recent_pace: f64,
    /// Units the item is expected to sell from now on at this price.
    pub remaining_demand: f64,
    /// The marginal value of a unit of the product's capacity (0: capacity to spare).
    pub bid_price: f64,
    /// Units the product is expected to sell from now on at the solved prices: at most
    /// `units_left` (an outside probe saw 98.9 with 60 left, and 0.33 sold out).
    pub expected_sales: f64,
    /// Whether the product is expected to sell out at these prices.
    pub sells_out: bool,
    /// Units bought so far (the data behind the estimate).
    pub units_observed: u64,
    /// Share of the item's demand observed so far (by the booking curve).
    pub demand_observed: f64,
    pub curve: CurveSource,
    /// The product sold nothing at all while the user's belief expected 15 units or more
    /// by then: the default looked above the market, so the cut floors no longer hold the
    /// price, and it steps down while the sales stay far short of the belief.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub belief_refuted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<ModelNote>,
}

fn one() -> f64 {
    1.0
}

/// Nothing estimated: zeros, the prior curve, and a recent pace of 1 (as expected).
impl Default for RevenueExplanation {
    fn default() -> Self {
        RevenueExplanation {
            demand_level: 0.0,
            price_response: 0.0,
            units_left: 0,
            time_left: 0.0,
            demand_left: 0.0,
            recent_pace: 1.0,
            remaining_demand: 0.0,
            bid_price: 0.0,
            expected_sales: 0.0,
            sells_out: false,
            units_observed: 0,
            demand_observed: 0.0,
            curve: CurveSource::default(),
            belief_refuted: false,
            note: None,
        }
    }
}

/// The sales stats an `itemSale` adds: bought units at the price paid, at the elapsed
/// share of the item's sales period at `at` (no bin without a time).
pub fn record_sale(item: &mut ItemState, units: u64, price: Money, at: Option<Timestamp>) {
    let tau = at.map(|t| elapsed_share(&item.properties.sales_period, t));
    item.demand.record(
        units,
        price.to_f64(),
        tau,
        item.properties.price_settings.default.to_f64(),
    );
}

/// The product's share of an `itemSale` of `item` (`units` < 0: a return).
pub fn record_product_sale(
    product: &mut ProductState,
    item: &ItemState,
    units: i64,
    price: Money,
    at: Option<Timestamp>,
) {
    let tau = at.map(|t| elapsed_share(&item.properties.sales_period, t));
    let left = product.properties.capacity.map(|c| {
        let c = i64::try_from(c).unwrap_or(i64::MAX);
        let reserved = i64::try_from(product.reserved).unwrap_or(i64::MAX);
        c.saturating_sub(reserved)
            .saturating_sub(product.demand.net_sold.saturating_add(units))
    });
    product.demand.record(
        &item.item_id,
        units,
        price.to_f64(),
        tau,
        item.properties.price_settings.default.to_f64(),
        left,
        &item.properties.sales_period,
    );
}

#[cfg(test)]
mod tests;
