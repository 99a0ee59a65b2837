//! Explanations: why an item has its price. Every calculated or kept price carries one;
//! they serialize as camelCase JSON (price history, webhooks, debugging).

use serde::{Deserialize, Serialize};

use super::rounding::Bound;
use crate::ids::{ItemId, MatchId};
use crate::money::Money;
use crate::time::{Period, Timestamp};

/// Why an item has its price. A calculated price has `model` (and the stages after it); a
/// kept price has `kept`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The model and its inputs (calculated prices only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelExplanation>,
    /// M, the product multiplier the model yielded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_multiplier: Option<f64>,
    /// The item's own `priceSettings.multiplier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_multiplier: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_price: Option<Money>,
    /// `default * itemMultiplier * M`, to the millionth, before anything else applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<Money>,
    /// Set when `maxStepChange` capped the change against the previous price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_step_change: Option<StepCap>,
    /// Set when min or max applied to the model price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<BoundApplied>,
    /// Rounding of the model price to the product's step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounding: Option<RoundingApplied>,
    /// Set when a price match rule replaced the model price.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub price_match: Option<Box<MatchApplied>>,
    /// Set when the item is the target of a rule that did not apply, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_skipped: Option<MatchSkipped>,
    /// Set for kept prices: why the item was not calculated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

impl Explanation {
    pub(crate) fn kept(kept: Kept) -> Self {
        Explanation {
            model: None,
            product_multiplier: None,
            item_multiplier: None,
            default_price: None,
            raw: None,
            max_step_change: None,
            bound: None,
            rounding: None,
            price_match: None,
            match_skipped: None,
            kept: Some(kept),
        }
    }
}

/// The model of the item's product and the inputs it used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ModelExplanation {
    /// M = ((actual + 0.01) / (expected + 0.01))^sensitivity.
    #[serde(rename_all = "camelCase")]
    Pace {
        sensitivity: f64,
        curve: f64,
        expected_sales: f64,
        /// Elapsed share of the item's sales period (0..1).
        tau: f64,
        /// expectedSales * tau^curve.
        expected: f64,
        /// Units sold of the product's live items.
        sold: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity: Option<u64>,
        /// sold / capacity (absent without a capacity).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        actual: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<ModelNote>,
    },
    /// Piecewise linear in the days before the main instance date.
    #[serde(rename_all = "camelCase")]
    TimeBased {
        /// Start of the first valid `meta.dates` entry tagged `main`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        main_date: Option<Timestamp>,
        /// Negative after the main date.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        days_before: Option<f64>,
        /// The two steps interpolated between (the same step twice beyond the ends).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        between: Option<[StepPoint; 2]>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<ModelNote>,
    },
    /// Drawdown by share sold: the first tier whose upToSoldPercent >= the sold percent.
    #[serde(rename_all = "camelCase")]
    Tiers {
        sold: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sold_percent: Option<f64>,
        /// Index of the chosen tier in the model's list.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tier: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        up_to_sold_percent: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<ModelNote>,
    },
    /// M = 1.
    #[serde(rename_all = "camelCase")]
    Fixed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<ModelNote>,
    },
    /// Learned demand, the remaining problem re-solved (see `pricing::revenue`).
    Revenue(Box<super::revenue::RevenueExplanation>),
}

impl ModelExplanation {
    /// The wire name of the model.
    pub fn name(&self) -> &'static str {
        match self {
            ModelExplanation::Pace { .. } => "pace",
            ModelExplanation::TimeBased { .. } => "timeBased",
            ModelExplanation::Tiers { .. } => "tiers",
            ModelExplanation::Fixed { .. } => "fixed",
            ModelExplanation::Revenue(_) => "revenue",
        }
    }
}

/// One step of a timeBased model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepPoint {
    pub days_before: f64,
    pub multiplier: f64,
}

/// Why a model fell back (M = 1 unless said otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelNote {
    /// The product has no capacity (and its items no legacy quantity): M = 1.
    NoCapacity,
    /// The product's capacity is 0: no share sold is defined, M = 1.
    ZeroCapacity,
    /// No valid `meta.dates` entry tagged `main`: M = 1.
    NoMainDate,
    /// The model has no steps or tiers: M = 1.
    EmptyModel,
    /// The sold percent is above every tier's upToSoldPercent and there is no catch-all
    /// tier: the last tier applies.
    BeyondLastTier,
    /// The item's product is not registered (never after a valid log): M = 1 and the
    /// default rounding step.
    UnknownProduct,
}

impl ModelNote {
    pub fn message(self) -> &'static str {
        match self {
            ModelNote::NoCapacity => "the product has no capacity, so no share sold: M = 1",
            ModelNote::ZeroCapacity => "the product's capacity is 0, so no share sold: M = 1",
            ModelNote::NoMainDate => "the instance has no valid date tagged main: M = 1",
            ModelNote::EmptyModel => "the model has no steps or tiers: M = 1",
            ModelNote::BeyondLastTier => {
                "the share sold is above every tier and there is no catch-all: the last tier applies"
            }
            ModelNote::UnknownProduct => "the item's product is not registered: M = 1",
        }
    }
}

/// `maxStepChange` capped the change against the previous price (before rounding).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCap {
    pub limit: f64,
    pub previous_price: Money,
    pub from: Money,
    pub to: Money,
}

/// A bound of the item's `[min, max]` applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundApplied {
    pub bound: Bound,
    pub from: Money,
    pub to: Money,
}

/// Rounding to the product's step (half away from zero), then back inside the bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundingApplied {
    pub step: Money,
    pub from: Money,
    pub to: Money,
    /// Set when the rounded value left the bounds and was moved back inside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclamped: Option<Bound>,
}

/// A price match rule set the price: `source * ratio + offset`, clamped to this item's
/// bounds and rounded to its product's step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchApplied {
    pub match_id: MatchId,
    pub source_item_id: ItemId,
    pub source_price: Money,
    pub ratio: f64,
    pub offset: Money,
    /// The price the model gave before the match replaced it.
    pub model_price: Money,
    /// `source * ratio + offset`, to the millionth.
    pub raw: Money,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<BoundApplied>,
    pub rounding: RoundingApplied,
}

/// A rule targeting this item that did not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchSkipped {
    pub match_id: MatchId,
    pub reason: super::matches::SkipReason,
}

/// A kept price: why the item was not calculated and where the price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    pub reason: KeptReason,
    pub source: KeptSource,
    /// The dynamic pricing period in force, when the reason is about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Period>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeptReason {
    /// Scheduled pricing needs the instance to be active.
    InstanceInactive,
    /// The item's dynamicPricing toggle is off.
    DynamicPricingOff,
    /// `now` is outside the item's dynamic pricing period.
    OutsideDynamicPricingPeriod,
    /// The instance actions window does not overlap the item's sales period.
    NoDynamicPricingPeriod,
    /// A manual trigger resends prices without calculating.
    ManualResend,
}

impl KeptReason {
    pub fn message(self) -> &'static str {
        match self {
            KeptReason::InstanceInactive => "the instance is not active",
            KeptReason::DynamicPricingOff => "dynamic pricing is off for the item",
            KeptReason::OutsideDynamicPricingPeriod => {
                "now is outside the item's dynamic pricing period"
            }
            KeptReason::NoDynamicPricingPeriod => {
                "the instance actions window does not overlap the item's sales period"
            }
            KeptReason::ManualResend => "a manual trigger resends prices without calculating",
        }
    }
}

/// Where a kept price comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeptSource {
    PreviousPrice,
    /// The item never had a price: its default price.
    DefaultPrice,
}
