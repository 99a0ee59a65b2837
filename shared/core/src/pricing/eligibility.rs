//! Which items a calculation prices (DESIGN.md section 6, triggers).

use super::Trigger;
use super::explain::KeptReason;
use crate::entry::ItemProps;
use crate::state::{ActionsWindow, Header, ItemState};
use crate::time::{Period, Timestamp};

/// The period in which scheduled pricing applies to an item: its own dynamicPricingPeriod,
/// else its salesPeriod clipped to the instance actions window (deprecated instanceActions)
/// when there is one. `None` when that clipping leaves nothing.
pub fn dynamic_pricing_period(props: &ItemProps, window: Option<&ActionsWindow>) -> Option<Period> {
    if let Some(p) = props.dynamic_pricing_period {
        return Some(p);
    }
    let sales = props.sales_period;
    let Some(w) = window else {
        return Some(sales);
    };
    let start = w.from.map_or(sales.start, |f| f.max(sales.start));
    let end = w.until.map_or(sales.end, |u| u.min(sales.end));
    Period::new(start, end)
}

/// Whether `trigger` calculates a (live) item now, or why it keeps its price.
///
/// - `request` calculates every live item.
/// - `schedule` and `sales` calculate an item only when the instance is active, the item's
///   dynamicPricing toggle is on and `now` is inside its dynamic pricing period.
/// - `manual` calculates nothing (it resends).
pub fn eligibility(
    item: &ItemState,
    header: &Header,
    instance_active: bool,
    trigger: Trigger,
    now: Timestamp,
) -> Result<(), (KeptReason, Option<Period>)> {
    match trigger {
        Trigger::Request => Ok(()),
        Trigger::Manual => Err((KeptReason::ManualResend, None)),
        Trigger::Schedule | Trigger::Sales => {
            if !instance_active {
                return Err((KeptReason::InstanceInactive, None));
            }
            if !item.properties.dynamic_pricing {
                return Err((KeptReason::DynamicPricingOff, None));
            }
            match dynamic_pricing_period(&item.properties, header.actions_window.as_ref()) {
                None => Err((KeptReason::NoDynamicPricingPeriod, None)),
                Some(p) if !p.contains(now) => {
                    Err((KeptReason::OutsideDynamicPricingPeriod, Some(p)))
                }
                Some(_) => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::testkit::*;

    fn item(dpp: Option<(&'static str, &'static str)>) -> ItemState {
        let mut b = Builder::new();
        b.product("p", Product::default());
        b.item(
            "a",
            "p",
            Item {
                sales: ("2026-01-01T00:00:00Z", "2026-07-01T00:00:00Z"),
                dynamic_pricing_period: dpp,
                ..Item::default()
            },
        );
        b.state.items[&id("a")].clone()
    }

    fn window(from: Option<&str>, until: Option<&str>) -> ActionsWindow {
        ActionsWindow {
            from: from.map(ts),
            until: until.map(ts),
        }
    }

    #[test]
    fn the_period_defaults_to_the_sales_period_clipped_to_the_actions_window() {
        let plain = item(None);
        let sales = plain.properties.sales_period;
        assert_eq!(dynamic_pricing_period(&plain.properties, None), Some(sales));
        let w = window(Some("2026-03-01T00:00:00Z"), Some("2026-09-01T00:00:00Z"));
        let p = dynamic_pricing_period(&plain.properties, Some(&w)).unwrap();
        assert_eq!((p.start, p.end), (ts("2026-03-01T00:00:00Z"), sales.end));
        let w = window(None, Some("2026-02-01T00:00:00Z"));
        let p = dynamic_pricing_period(&plain.properties, Some(&w)).unwrap();
        assert_eq!((p.start, p.end), (sales.start, ts("2026-02-01T00:00:00Z")));
        // No overlap: no period.
        let w = window(Some("2026-08-01T00:00:00Z"), None);
        assert_eq!(dynamic_pricing_period(&plain.properties, Some(&w)), None);
        // An item's own period wins over the window.
        let own = item(Some(("2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z")));
        let p = dynamic_pricing_period(&own.properties, Some(&w)).unwrap();
        assert_eq!(p.start, ts("2026-08-01T00:00:00Z"));
    }

    #[test]
    fn the_rules_are_checked_in_order_and_request_skips_them() {
        let header = Header::default();
        let now = ts("2026-08-15T00:00:00Z");
        let mut it = item(None);
        it.properties.dynamic_pricing = false;
        let check =
            |it: &ItemState, active, trigger| eligibility(it, &header, active, trigger, now);
        assert_eq!(
            check(&it, false, Trigger::Schedule),
            Err((KeptReason::InstanceInactive, None))
        );
        assert_eq!(
            check(&it, true, Trigger::Sales),
            Err((KeptReason::DynamicPricingOff, None))
        );
        it.properties.dynamic_pricing = true;
        assert_eq!(
            check(&it, true, Trigger::Schedule),
            Err((
                KeptReason::OutsideDynamicPricingPeriod,
                Some(it.properties.sales_period)
            ))
        );
        assert_eq!(check(&it, false, Trigger::Request), Ok(()));
        assert_eq!(
            check(&it, true, Trigger::Manual),
            Err((KeptReason::ManualResend, None))
        );
        // The end of a period is outside it (half-open), the start inside.
        let end = it.properties.sales_period.end;
        assert!(eligibility(&it, &header, true, Trigger::Schedule, end).is_err());
        let start = it.properties.sales_period.start;
        assert!(eligibility(&it, &header, true, Trigger::Schedule, start).is_ok());
    }
}
