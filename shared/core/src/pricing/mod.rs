//! The pricing engine (DESIGN.md section 6): pure, deterministic, no I/O.
//!
//! [`calculate`] prices the live items of an instance:
//!
//! 1. Eligibility ([`eligibility`]): `request` calculates every live item with the
//!    dynamicPricing toggle on (active or not, whatever its periods); `sales` items with
//!    the toggle on and `now` inside their dynamic pricing period (active or not);
//!    `schedule` the same, of an active instance only; `manual` calculates nothing. Items
//!    not calculated keep their last price (or their default price when they never had
//!    one); an item whose toggle is off is at its default as its settings make it.
//! 2. The product's model yields M ([`models`]); the model price is
//!    `default * multiplier * M`, to the millionth, then capped by `maxStepChange` against
//!    the previous price, clamped to `[min, max]` and rounded to the product's
//!    `rounding.step` without leaving the bounds ([`rounding`]).
//! 3. Price match rules ([`matches`]) replace the model price of calculated targets, in
//!    dependency order: `source * ratio + offset`, clamped to the target's bounds and
//!    rounded to the target product's step.
//!
//! Every price carries an [`Explanation`]. Trigger helpers (sold-percent crossings and
//! schedule slots) are in [`triggers`].

pub mod demand;
pub mod eligibility;
pub mod explain;
pub mod matches;
pub mod models;
pub mod revenue;
pub mod rounding;
pub mod triggers;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use eligibility::{dynamic_pricing_periods, eligibility};
pub use explain::{
    BoundApplied, Explanation, Kept, KeptReason, KeptSource, MatchApplied, MatchSkipped,
    ModelExplanation, ModelNote, RoundingApplied, StepCap, StepPoint,
};
pub use matches::{
    MatchRuleError, MatchValidation, PriceMatch, SkipReason, SkippedMatch, validate_matches,
};
pub use models::{ProductInputs, main_date, product_multiplier};
pub use revenue::{CurveSource, Previous, ProjectHistory, RevenueExplanation};
pub use rounding::{Bound, round_to_step, round_within};
pub use triggers::{ScheduleSlots, schedule_slots, sold_percent_crossed};

use crate::entry::{PricingModel, Rounding};
use crate::ids::{ItemId, ProductId};
use crate::money::Money;
use crate::state::{InstanceState, ItemState, ProductState};
use crate::time::Timestamp;
use models::Prepared;

/// What started a calculation (DESIGN.md section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Trigger {
    /// The instance's pricing schedule.
    Schedule,
    /// A product's sold percent crossed a multiple of its soldPercentStep.
    Sales,
    /// calculatePrices: calculates every live item with dynamic pricing on, whether the
    /// instance is active and whatever the periods.
    Request,
    /// A subscription's manual trigger: resends, calculates nothing.
    Manual,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Sales => "sales",
            Trigger::Request => "request",
            Trigger::Manual => "manual",
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a price was calculated now or kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PriceStatus {
    Calculated,
    Kept,
}

/// The price of one live item after a calculation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemPrice {
    pub item_id: ItemId,
    pub price: Money,
    /// The price before this calculation (`null` when the item never had one).
    #[serde(default)]
    pub previous_price: Option<Money>,
    /// `price != previousPrice`; true for an item's first price.
    pub changed: bool,
    pub status: PriceStatus,
    pub explanation: Explanation,
    /// What the revenue model carries to the next calculation: how much of the booking
    /// curve passed at each price (absent for other models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposure: Option<demand::Exposure>,
}

/// Each item's price in `prices` (a calculation's), by item: what the next calculation
/// caps its step against.
pub fn prices_by_item(prices: &[ItemPrice]) -> BTreeMap<ItemId, Money> {
    prices
        .iter()
        .map(|p| (p.item_id.clone(), p.price))
        .collect()
}

/// The exposures `prices` (a calculation's) carry to the next calculation, by item (the
/// revenue model's; other models carry none).
pub fn exposures_by_item(prices: &[ItemPrice]) -> BTreeMap<ItemId, demand::Exposure> {
    prices
        .iter()
        .filter_map(|p| Some((p.item_id.clone(), p.exposure.clone()?)))
        .collect()
}

/// The result of [`calculate`]: every live item in item id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Calculation {
    pub trigger: Trigger,
    pub calculated_at: Timestamp,
    pub prices: Vec<ItemPrice>,
    /// Price match rules that did not apply in this calculation, and why.
    #[serde(default)]
    pub skipped_matches: Vec<SkippedMatch>,
}

impl Calculation {
    pub fn get(&self, item_id: &ItemId) -> Option<&ItemPrice> {
        self.prices
            .binary_search_by(|p| p.item_id.cmp(item_id))
            .ok()
            .map(|i| &self.prices[i])
    }

    /// Items priced by this calculation.
    pub fn calculated(&self) -> impl Iterator<Item = &ItemPrice> {
        self.prices
            .iter()
            .filter(|p| p.status == PriceStatus::Calculated)
    }

    /// Items that kept their price.
    pub fn kept(&self) -> impl Iterator<Item = &ItemPrice> {
        self.prices.iter().filter(|p| p.status == PriceStatus::Kept)
    }

    /// Items whose price differs from their previous one.
    pub fn changed(&self) -> impl Iterator<Item = &ItemPrice> {
        self.prices.iter().filter(|p| p.changed)
    }
}

/// What the engine needs of a product, prepared once per calculation.
struct ProductCtx {
    prepared: Prepared,
    step: Money,
    max_step_change: Option<f64>,
    /// The product set `maxStepChange` itself: an item's first calculation is capped
    /// against its default price as its settings make it (the price it had until then),
    /// not left free. The revenue model's own cap leaves a first price free.
    caps_first_price: bool,
}

impl ProductCtx {
    fn unknown() -> Self {
        ProductCtx {
            prepared: Prepared::Constant {
                m: 1.0,
                explanation: ModelExplanation::Fixed {
                    note: Some(ModelNote::UnknownProduct),
                },
            },
            step: Rounding::default().step,
            max_step_change: None,
            caps_first_price: false,
        }
    }
}

/// Prices the live items of an instance (removed items never appear).
///
/// - `instance_active`: the instance's active flag as seen at `now` (see
///   `model::Instance::is_active`).
/// - `previous`: each item's last price; kept items keep it, `maxStepChange` caps against it.
/// - `matches`: the instance's price match rules, in their stored order. Any rule set is
///   accepted here (rules that cannot apply are skipped and listed); refuse bad sets with
///   [`validate_matches`] when they are stored.
pub fn calculate(
    state: &InstanceState,
    instance_active: bool,
    trigger: Trigger,
    now: Timestamp,
    previous: &BTreeMap<ItemId, Money>,
    matches: &[PriceMatch],
) -> Calculation {
    let exposures = BTreeMap::new();
    let previous = Previous {
        at: None,
        prices: previous,
        exposures: &exposures,
    };
    calculate_with(
        state,
        instance_active,
        trigger,
        now,
        &previous,
        matches,
        &ProjectHistory::default(),
    )
}

/// [`calculate`] with what the revenue model learns from: the previous calculation (its
/// time and each item's exposure) and the booking curves of the project's past instances.
pub fn calculate_with(
    state: &InstanceState,
    instance_active: bool,
    trigger: Trigger,
    now: Timestamp,
    last: &Previous<'_>,
    matches: &[PriceMatch],
    history: &ProjectHistory,
) -> Calculation {
    calculate_explaining(
        state,
        instance_active,
        trigger,
        now,
        last,
        matches,
        history,
        Explain::Every,
    )
}

/// Which prices of a calculation carry their explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explain {
    Every,
    /// Only the prices that changed (`model::is_history_entry`: calculated, or kept and
    /// moved inside changed bounds), and the targets of price match rules until the rules
    /// are applied; the others get
    /// `Explanation::default()` as soon as they are priced. What a store keeps: a
    /// 100,000-item instance's explanations are ~50 MB, and most prices do not change.
    Changed,
}

/// [`calculate_with`], explaining the prices `explain` names.
#[allow(clippy::too_many_arguments)]
pub fn calculate_explaining(
    state: &InstanceState,
    instance_active: bool,
    trigger: Trigger,
    now: Timestamp,
    last: &Previous<'_>,
    matches: &[PriceMatch],
    history: &ProjectHistory,
    explain: Explain,
) -> Calculation {
    // A rule may still change a target's price, and it edits the target's explanation.
    let match_targets: std::collections::BTreeSet<&ItemId> =
        matches.iter().map(|rule| &rule.item_id).collect();
    let totals = state.product_totals();
    let main = models::main_date(&state.header.meta);
    let product_list: Vec<&ProductState> = state.products.values().collect();
    let contexts: Vec<ProductCtx> = product_list
        .iter()
        .map(|p| {
            let t = totals.get(&p.product_id).copied().unwrap_or_default();
            let inputs = ProductInputs {
                expected_sales: p.properties.expected_sales,
                sold: t.sold,
                capacity: InstanceState::effective_capacity(p, &t),
                main_date: main,
            };
            let prepared = match &p.properties.pricing_model {
                PricingModel::Revenue { .. } => Prepared::Revenue,
                model => Prepared::new(model, &inputs, now),
            };
            ProductCtx {
                prepared,
                step: p.properties.rounding.step,
                max_step_change: match &p.properties.pricing_model {
                    PricingModel::Revenue {
                        max_step_change: None,
                    } => Some(revenue::DEFAULT_MAX_STEP_CHANGE),
                    model => models::max_step_change(model),
                },
                caps_first_price: models::max_step_change(&p.properties.pricing_model).is_some(),
            }
        })
        .collect();
    // Nothing here is sized by the items but the result: the items are walked in id
    // order, with the previous calculation's maps alongside them (no lookup per item).
    let mut plans = RevenuePlans::new(state, &product_list, &totals, last, history, now);
    let unknown = ProductCtx::unknown();
    let mut prices = Vec::with_capacity(state.items.len());
    let mut product_of = ProductOf::new(&product_list);
    let mut previous = Aligned::new(last.prices);
    for item in state.items.values().filter(|i| !i.removed) {
        let prev = previous.get(&item.item_id).copied();
        let product = product_of.get(item);
        let ctx = product.map_or(&unknown, |p| &contexts[p]);
        // A revenue product's plans come in the order of its items, which is this one.
        let plan = product.and_then(|p| plans.next(p));
        let (priced, exposure) =
            match eligibility(item, &state.header, instance_active, trigger, now) {
                Ok(()) => model_price(item, ctx, plan, prev, now),
                Err((reason, period)) => (
                    kept_price(item, ctx.step, prev, reason, period),
                    plan.map(revenue::ItemPlan::into_exposure),
                ),
            };
        let mut price = ItemPrice {
            item_id: item.item_id.clone(),
            changed: prev != Some(priced.0),
            price: priced.0,
            previous_price: prev,
            status: priced.1,
            explanation: priced.2,
            exposure,
        };
        if explain == Explain::Changed
            && !crate::model::is_history_entry(&price)
            && !match_targets.contains(&item.item_id)
        {
            price.explanation = Explanation::default();
        }
        prices.push(price);
    }

    let products: BTreeMap<&ProductId, &ProductCtx> = product_list
        .iter()
        .zip(&contexts)
        .map(|(p, ctx)| (&p.product_id, ctx))
        .collect();
    let ctx_of = |product_id: &ProductId| products.get(product_id).copied().unwrap_or(&unknown);
    let mut calculation = Calculation {
        trigger,
        calculated_at: now,
        prices,
        skipped_matches: Vec::new(),
    };
    apply_matches(&mut calculation, state, matches, &ctx_of);
    calculation
}

/// The revenue model's plans, for each product (by index in `products`) priced by it: the
/// plans of its live items in item id order (each product's items are solved together).
/// A product is solved when its first item is priced, not all up front: a 100,000-item
/// instance's plans are ~22 MB, and a product's items are usually consecutive, so few
/// products' plans exist at once.
struct RevenuePlans<'a> {
    products: &'a [&'a ProductState],
    totals: &'a BTreeMap<&'a ProductId, crate::state::ProductTotals>,
    previous_at: Option<Timestamp>,
    history: &'a ProjectHistory,
    now: Timestamp,
    /// The inputs of each revenue product not solved yet.
    inputs: Vec<Vec<revenue::ItemInput<'a>>>,
    plans: Vec<Option<std::vec::IntoIter<revenue::ItemPlan>>>,
}

impl<'a> RevenuePlans<'a> {
    fn new(
        state: &'a InstanceState,
        products: &'a [&'a ProductState],
        totals: &'a BTreeMap<&'a ProductId, crate::state::ProductTotals>,
        last: &Previous<'a>,
        history: &'a ProjectHistory,
        now: Timestamp,
    ) -> Self {
        let mut inputs: Vec<Vec<revenue::ItemInput<'a>>> = vec![Vec::new(); products.len()];
        if products.iter().any(|p| is_revenue(p)) {
            let mut product_of = ProductOf::new(products);
            let (mut prices, mut exposures) =
                (Aligned::new(last.prices), Aligned::new(last.exposures));
            for item in state.items.values().filter(|i| !i.removed) {
                if let Some(p) = product_of.get(item)
                    && is_revenue(products[p])
                {
                    inputs[p].push(revenue::ItemInput {
                        item,
                        previous_price: prices.get(&item.item_id).copied(),
                        carried: exposures.get(&item.item_id),
                    });
                }
            }
        }
        RevenuePlans {
            products,
            totals,
            previous_at: last.at,
            history,
            now,
            inputs,
            plans: (0..products.len()).map(|_| None).collect(),
        }
    }

    /// The plan of the next item (in id order) of product `p`; `None` for a product of
    /// another model.
    fn next(&mut self, p: usize) -> Option<revenue::ItemPlan> {
        let product = self.products[p];
        if !is_revenue(product) {
            return None;
        }
        if self.plans[p].is_none() {
            let inputs = std::mem::take(&mut self.inputs[p]);
            let t = self
                .totals
                .get(&product.product_id)
                .copied()
                .unwrap_or_default();
            let plans = revenue::plan_product(
                &inputs,
                product,
                InstanceState::effective_capacity(product, &t),
                t.sold.saturating_add(t.reserved),
                self.previous_at,
                self.history,
                self.now,
            );
            self.plans[p] = Some(plans.into_iter());
        }
        let plans = self.plans[p].as_mut()?;
        let plan = plans.next();
        if plans.len() == 0 {
            // The product's last item: its plans' buffer goes now, not at the end.
            self.plans[p] = Some(Vec::new().into_iter());
        }
        plan
    }
}

fn is_revenue(p: &ProductState) -> bool {
    matches!(p.properties.pricing_model, PricingModel::Revenue { .. })
}

/// The product of each item, by its index in the products (in id order), for items asked
/// in id order: a product's items are usually consecutive, so mostly one comparison.
struct ProductOf<'a> {
    products: &'a [&'a ProductState],
    last: Option<(&'a ProductId, Option<usize>)>,
}

impl<'a> ProductOf<'a> {
    fn new(products: &'a [&'a ProductState]) -> Self {
        ProductOf {
            products,
            last: None,
        }
    }

    fn get(&mut self, item: &'a ItemState) -> Option<usize> {
        match self.last {
            Some((id, index)) if *id == item.product_id => index,
            _ => {
                let index = self
                    .products
                    .binary_search_by(|p| p.product_id.cmp(&item.product_id))
                    .ok();
                self.last = Some((&item.product_id, index));
                index
            }
        }
    }
}

/// The entries of a map keyed by item id, for item ids asked in increasing order (one
/// walk of the map).
struct Aligned<'m, V> {
    entries: std::iter::Peekable<std::collections::btree_map::Iter<'m, ItemId, V>>,
}

impl<'m, V> Aligned<'m, V> {
    fn new(map: &'m BTreeMap<ItemId, V>) -> Self {
        Aligned {
            entries: map.iter().peekable(),
        }
    }

    fn get(&mut self, item_id: &ItemId) -> Option<&'m V> {
        // One comparison per entry passed (the ids are compared once, not for order and
        // then for equality).
        while let Some((id, v)) = self.entries.peek() {
            match (*id).cmp(item_id) {
                std::cmp::Ordering::Less => {
                    self.entries.next();
                }
                std::cmp::Ordering::Equal => return Some(*v),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}

/// An item's default price as its settings make it (times its multiplier, within its
/// bounds, rounded to the product's `step`): its price until its first calculation.
fn default_as_set(ps: &crate::entry::PriceSettings, step: Money) -> Money {
    bounded(rounding::scale(ps.default, ps.multiplier), ps, step, None).0
}

/// The price of an item this calculation does not price: its previous price, else its
/// default price as its settings make it (times its multiplier, within its bounds,
/// rounded to the product's `step`), so that a price never published before is on the
/// product's grid like every calculated one. An item whose dynamic pricing is off is
/// always at its default price as its settings make it: its settings are how the seller
/// prices it (it kept the price it first had, and a new default or multiplier never
/// showed: an outside probe's item stayed at 50 after its default became 70).
fn kept_price(
    item: &ItemState,
    step: Money,
    prev: Option<Money>,
    reason: KeptReason,
    period: Option<crate::time::Period>,
) -> (Money, PriceStatus, Explanation) {
    let ps = &item.properties.price_settings;
    // Whatever else keeps it (the instance inactive); a manual trigger resends the prices
    // as they were.
    let prev =
        prev.filter(|_| item.properties.dynamic_pricing || reason == KeptReason::ManualResend);
    let (price, source) = match prev {
        Some(p) => (p, KeptSource::PreviousPrice),
        None => (default_as_set(ps, step), KeptSource::DefaultPrice),
    };
    let mut explanation = Explanation::kept(Kept {
        reason,
        source,
        period,
    });
    // A kept price stays within the item's bounds as they are now: where they changed
    // since it was set, it moves to the nearest one (on the product's grid), as a
    // calculated price would, and the explanation says so.
    let (moved, bound, rounding) = bounded(price, ps, step, None);
    if bound.is_none() {
        return (price, PriceStatus::Kept, explanation);
    }
    explanation.bound = bound;
    explanation.rounding = Some(rounding);
    (moved, PriceStatus::Kept, explanation)
}

/// `value` clamped to the item's bounds and rounded to `step` within them, and within the
/// step cap `cap` (the previous price and `maxStepChange`) where no bound applied
/// ([`rounding::round_within_cap`]): the price, and the bound and the rounding applied.
fn bounded(
    value: Money,
    ps: &crate::entry::PriceSettings,
    step: Money,
    cap: Option<(Money, f64)>,
) -> (Money, Option<BoundApplied>, RoundingApplied) {
    let (clamped, bound) = rounding::clamp(value, ps.min, ps.max);
    let cap = cap.filter(|_| bound.is_none());
    let rounded = rounding::round_within_cap(clamped, step, ps.min, ps.max, cap);
    (
        rounded.value,
        bound.map(|bound| BoundApplied {
            bound,
            from: value,
            to: clamped,
        }),
        RoundingApplied {
            step,
            from: clamped,
            to: rounded.value,
            reclamped: rounded.reclamped,
        },
    )
}

/// The model price of one item: raw -> maxStepChange -> bounds -> rounding.
fn model_price(
    item: &ItemState,
    ctx: &ProductCtx,
    plan: Option<revenue::ItemPlan>,
    prev: Option<Money>,
    now: Timestamp,
) -> ((Money, PriceStatus, Explanation), Option<demand::Exposure>) {
    let ps = &item.properties.price_settings;
    let (m, model, exposure) = match plan {
        Some(plan) => {
            let (m, model, exposure) = plan.into_model(item);
            (m, model, Some(exposure))
        }
        None => {
            let (m, model) = ctx.prepared.multiplier(&item.properties.sales_period, now);
            (m, model, None)
        }
    };
    let raw = rounding::scale(ps.default, ps.multiplier * m);
    let mut value = raw;
    let mut max_step_change = None;
    // `maxStepChange` is relative to the previous price: from 0 it would hold the price
    // at 0 for good, so a previous price of 0 caps nothing. An item never priced had its
    // default price as its settings make it (what webhooks and the history show as its
    // price until now), so a product's own `maxStepChange` caps its first move from it.
    let prev_capping = prev
        .or_else(|| ctx.caps_first_price.then(|| default_as_set(ps, ctx.step)))
        .filter(|p| *p > Money::ZERO);
    if let (Some(limit), Some(prev)) = (ctx.max_step_change, prev_capping) {
        let (capped, applied) = rounding::cap_step_change(value, prev, limit);
        if applied {
            max_step_change = Some(StepCap {
                limit,
                previous_price: prev,
                from: value,
                to: capped,
            });
            value = capped;
        }
    }
    let cap = ctx
        .max_step_change
        .zip(prev_capping)
        .map(|(limit, prev)| (prev, limit));
    let (price, bound, rounding) = bounded(value, ps, ctx.step, cap);
    let explanation = Explanation {
        model: Some(model),
        product_multiplier: Some(m),
        item_multiplier: Some(ps.multiplier),
        default_price: Some(ps.default),
        raw: Some(raw),
        max_step_change,
        bound,
        rounding: Some(rounding),
        price_match: None,
        match_skipped: None,
        kept: None,
    };
    ((price, PriceStatus::Calculated, explanation), exposure)
}

fn apply_matches<'a>(
    calculation: &mut Calculation,
    state: &InstanceState,
    rules: &[PriceMatch],
    ctx_of: &impl Fn(&ProductId) -> &'a ProductCtx,
) {
    if rules.is_empty() {
        return;
    }
    let plan = matches::plan(rules, state);
    let index =
        |prices: &[ItemPrice], id: &ItemId| prices.binary_search_by(|p| p.item_id.cmp(id)).ok();
    let skip = |calculation: &mut Calculation, rule: &PriceMatch, reason: SkipReason| {
        if let Some(t) = index(&calculation.prices, &rule.item_id) {
            let ex = &mut calculation.prices[t].explanation;
            if ex.match_skipped.is_none() && ex.price_match.is_none() {
                ex.match_skipped = Some(MatchSkipped {
                    match_id: rule.match_id.clone(),
                    reason,
                });
            }
        }
        calculation.skipped_matches.push(SkippedMatch {
            match_id: rule.match_id.clone(),
            item_id: rule.item_id.clone(),
            source_item_id: rule.source_item_id.clone(),
            reason,
        });
    };
    for &(rule, reason) in &plan.skipped {
        skip(calculation, rule, reason);
    }
    for rule in plan.order {
        // The plan only holds rules whose items are live, so both are in `prices`.
        let (Some(t), Some(s), Some(target)) = (
            index(&calculation.prices, &rule.item_id),
            index(&calculation.prices, &rule.source_item_id),
            state.items.get(&rule.item_id),
        ) else {
            continue;
        };
        if calculation.prices[t].status == PriceStatus::Kept {
            skip(calculation, rule, SkipReason::TargetKept);
            continue;
        }
        let source_price = calculation.prices[s].price;
        let ps = &target.properties.price_settings;
        let step = ctx_of(&target.product_id).step;
        let raw = rounding::scale_offset(source_price, rule.ratio, rule.offset);
        let (price, bound, rounding) = bounded(raw, ps, step, None);
        let p = &mut calculation.prices[t];
        p.explanation.price_match = Some(Box::new(MatchApplied {
            match_id: rule.match_id.clone(),
            source_item_id: rule.source_item_id.clone(),
            source_price,
            ratio: rule.ratio,
            offset: rule.offset,
            model_price: p.price,
            raw,
            bound,
            rounding,
        }));
        p.price = price;
        p.changed = p.previous_price != Some(p.price);
    }
}
