//! The market of `simulate market` without `--scenario`: one item described by flags.

use pricing_core::ids::ItemId;
use pricing_core::money::Money;

use super::fail;
use super::scenario::{
    Context, DEFAULT_RUNS, DEFAULT_SEED, FLAG_ITEM, ItemMarket, MAX_ARRIVALS, MAX_CAPACITY,
    MAX_SLOTS, MILLIS_PER_DAY, Scenario, Shape, Wtp,
};
use crate::Error;
use crate::cli::MarketArgs;

/// The market of the flag form: one item over `--days`, buyers arriving at a rate that
/// rises linearly from 0.5 to 2 (relative) over the period, with exponential
/// willingness to pay whose elasticity at the default price is `--elasticity`
/// (mean = default / -elasticity) and as many arrivals as make the expected demand at the
/// default price `--base-demand` a day on average times 1.25 (the old time factor
/// `0.5 + 1.5 * share` averaged over the period).
pub fn scenario_from_flags(args: &MarketArgs) -> Result<Scenario, Error> {
    if args.days == 0 || args.steps_per_day == 0 {
        return Err(fail("--days and --steps-per-day must be at least 1"));
    }
    // A scenario file's bounds (an outside probe: a million days were taken here).
    let file = super::scenario::Bounds::FILE;
    if u64::from(args.days) > file.max_days {
        return Err(fail(format!("--days must be at most {}", file.max_days)));
    }
    if u64::from(args.steps_per_day) > file.max_slots_per_day {
        return Err(fail(format!(
            "--steps-per-day must be at most {}",
            file.max_slots_per_day
        )));
    }
    if args.capacity == 0 || args.capacity > MAX_CAPACITY {
        return Err(fail(format!("--capacity must be from 1 to {MAX_CAPACITY}")));
    }
    if !(args.base_demand.is_finite() && args.base_demand >= 0.0) {
        return Err(fail("--base-demand must be a number >= 0"));
    }
    if !(args.elasticity.is_finite() && args.elasticity < 0.0) {
        return Err(fail("--elasticity must be a negative number"));
    }
    let money = |flag: &str, v: f64| {
        Money::from_f64(v)
            .map_err(|e| fail(format!("{flag} {e}")))
            .and_then(|m| {
                if m.is_negative() {
                    Err(fail(format!("{flag} must not be negative")))
                } else {
                    Ok(v)
                }
            })
    };
    let (min, max, default) = (
        money("--min", args.min)?,
        money("--max", args.max)?,
        money("--default-price", args.default_price)?,
    );
    if !(min <= default && default <= max) || default <= 0.0 {
        return Err(fail(
            "--default-price must be positive and within [--min, --max]",
        ));
    }
    let slots = u64::from(args.days) * u64::from(args.steps_per_day);
    if slots > MAX_SLOTS {
        return Err(fail(format!(
            "--days x --steps-per-day is {slots}; at most {MAX_SLOTS}"
        )));
    }
    let mean = default / -args.elasticity;
    let demand_at_default = args.base_demand * f64::from(args.days) * 1.25;
    let arrivals = demand_at_default / (-default / mean).exp();
    if arrivals > MAX_ARRIVALS {
        return Err(fail(format!(
            "--base-demand and --elasticity give {arrivals:.0} buyers; at most {MAX_ARRIVALS}"
        )));
    }
    let item_id = ItemId::parse(FLAG_ITEM).map_err(|e| fail(e.to_string()))?;
    let scenario = Scenario {
        name: "flags".into(),
        period_ms: i64::from(args.days) * MILLIS_PER_DAY,
        slots,
        capacity: args.capacity,
        expected_sales: 1.0,
        items: vec![ItemMarket {
            item_id,
            min,
            max,
            default,
            arrivals,
            shape: Shape::new(&[[0.0, 0.5], [1.0, 2.0]]).map_err(fail)?,
            wtp: Wtp::Exponential { mean },
        }],
        past_instances: 0,
        runs: DEFAULT_RUNS,
        seed: DEFAULT_SEED,
        context: Context::default(),
    };
    pricing_simulate::references::check_size(&scenario)
        .map_err(|e| fail(format!("--capacity: {e}")))?;
    Ok(scenario)
}
