//! Which items a calculation prices (DESIGN.md section 6, triggers).

use super::Trigger;
use super::explain::KeptReason;
use crate::entry::ItemProps;
use crate::state::{ActionsWindow, Header, ItemState};
use crate::time::{Period, Timestamp};

/// The periods in which scheduled pricing applies to an item: its own
/// dynamicPricingPeriod, else its salesPeriod, clipped to each window of the deprecated
/// instanceActions when there are any (a window that leaves nothing of the sales period
/// gives no period). In date order; nothing is allocated.
pub fn dynamic_pricing_periods<'a>(
    props: &'a ItemProps,
    windows: &'a [ActionsWindow],
) -> impl Iterator<Item = Period> + 'a {
    let own = props.dynamic_pricing_period;
    let sales = props.sales_period;
    let plain = (own.is_none() && windows.is_empty()).then_some(sales);
    let clipped = windows
        .iter()
        .filter(move |_| own.is_none())
        .filter_map(move |w| {
            let start = w.from.map_or(sales.start, |f| f.max(sales.start));
            let end = w.until.map_or(sales.end, |u| u.min(sales.end));
            Period::new(start, end)
        });
    own.into_iter().chain(plain).chain(clipped)
}

/// The period `now` falls in, or the one to report when it falls in none: the next one
/// to start, else the last one. `Err(None)` when there is no period at all.
fn period_at(
    periods: impl Iterator<Item = Period>,
    now: Timestamp,
) -> Result<Period, Option<Period>> {
    let mut next: Option<Period> = None;
    let mut last = None;
    for p in periods {
        if p.contains(now) {
            return Ok(p);
        }
        if p.start > now && next.is_none_or(|n| p.start < n.start) {
            next = Some(p);
        }
        last = Some(p);
    }
    Err(next.or(last))
}

/// Whether `trigger` calculates a (live) item now, or why it keeps its price.
///
/// - `request` calculates every live item whose dynamicPricing toggle is on (whether the
///   instance is active and whatever the periods).
/// - `sales` calculates an item whose toggle is on and `now` inside its dynamic pricing
///   period, whether the instance is active: INTERFACE.md makes the active flag the
///   switch of scheduled pricing ("must be set for scheduled pricing to be enabled").
/// - `schedule` calculates an item only when the instance is active, the item's
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
        // A request prices the instance whether it is active and whatever the periods,
        // but an item whose dynamic pricing is off keeps its default: the toggle is for
        // dynamic pricing as a whole.
        Trigger::Request if !item.properties.dynamic_pricing => {
            Err((KeptReason::DynamicPricingOff, None))
        }
        Trigger::Request => Ok(()),
        Trigger::Manual => Err((KeptReason::ManualResend, None)),
        Trigger::Schedule | Trigger::Sales => {
            // The active flag is scheduled pricing's: a product's sales crossing its
            // soldPercentStep price an inactive instance too (instances start inactive,
            // and a user who set soldPercentStep and no `active` had no sales run at all).
            if trigger == Trigger::Schedule && !instance_active {
                return Err((KeptReason::InstanceInactive, None));
            }
            if !item.properties.dynamic_pricing {
                return Err((KeptReason::DynamicPricingOff, None));
            }
            // The item's dynamic pricing period (default: its sales period) holds for both:
            // a sales run does not reprice an item before or after its sales, or outside
            // the window a seller (or an instanceActions entry) gave it.
            let periods = dynamic_pricing_periods(&item.properties, header.action_windows());
            match period_at(periods, now) {
                Ok(_) => Ok(()),
                Err(None) => Err((KeptReason::NoDynamicPricingPeriod, None)),
                Err(Some(p)) => Err((KeptReason::OutsideDynamicPricingPeriod, Some(p))),
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

    fn periods(props: &ItemProps, windows: &[ActionsWindow]) -> Vec<(Timestamp, Timestamp)> {
        dynamic_pricing_periods(props, windows)
            .map(|p| (p.start, p.end))
            .collect()
    }

    #[test]
    fn the_periods_default_to_the_sales_period_clipped_to_each_actions_window() {
        let plain = item(None);
        let sales = plain.properties.sales_period;
        let props = &plain.properties;
        assert_eq!(periods(props, &[]), [(sales.start, sales.end)]);
        let w = window(Some("2026-03-01T00:00:00Z"), Some("2026-09-01T00:00:00Z"));
        assert_eq!(
            periods(props, &[w]),
            [(ts("2026-03-01T00:00:00Z"), sales.end)]
        );
        let w = window(None, Some("2026-02-01T00:00:00Z"));
        assert_eq!(
            periods(props, &[w]),
            [(sales.start, ts("2026-02-01T00:00:00Z"))]
        );
        // No overlap: no period.
        let late = window(Some("2026-08-01T00:00:00Z"), None);
        assert_eq!(periods(props, &[late]), []);
        // Every window of several, each clipped, those outside the sales period dropped.
        let windows = [
            window(None, Some("2026-02-01T00:00:00Z")),
            window(Some("2026-04-01T00:00:00Z"), Some("2026-05-01T00:00:00Z")),
            late,
        ];
        assert_eq!(
            periods(props, &windows),
            [
                (sales.start, ts("2026-02-01T00:00:00Z")),
                (ts("2026-04-01T00:00:00Z"), ts("2026-05-01T00:00:00Z")),
            ]
        );
        // An item's own period wins over the windows.
        let own = item(Some(("2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z")));
        assert_eq!(
            periods(&own.properties, &windows),
            [(ts("2026-08-01T00:00:00Z"), ts("2026-09-01T00:00:00Z"))]
        );
    }

    #[test]
    fn an_item_is_priced_inside_any_window_and_told_the_next_one_outside() {
        let mut it = item(None);
        it.properties.dynamic_pricing = true;
        let header = Header {
            actions_windows: vec![
                window(None, Some("2026-02-01T00:00:00Z")),
                window(Some("2026-04-01T00:00:00Z"), Some("2026-05-01T00:00:00Z")),
                window(Some("2026-06-01T00:00:00Z"), None),
            ],
            ..Header::default()
        };
        let at = |t: &str| eligibility(&it, &header, true, Trigger::Schedule, ts(t));
        assert_eq!(at("2026-01-15T00:00:00Z"), Ok(()));
        assert_eq!(at("2026-04-15T00:00:00Z"), Ok(()));
        assert_eq!(at("2026-06-15T00:00:00Z"), Ok(()));
        let (reason, period) = at("2026-03-01T00:00:00Z").unwrap_err();
        assert_eq!(reason, KeptReason::OutsideDynamicPricingPeriod);
        assert_eq!(
            period.unwrap().start,
            ts("2026-04-01T00:00:00Z"),
            "the next"
        );
        let (_, period) = at("2026-08-01T00:00:00Z").unwrap_err();
        assert_eq!(
            period.unwrap().start,
            ts("2026-06-01T00:00:00Z"),
            "the last"
        );
        // A state stored with the one window of earlier versions still reads it.
        let legacy = Header {
            actions_window: Some(window(Some("2026-04-01T00:00:00Z"), None)),
            ..Header::default()
        };
        assert!(
            eligibility(
                &it,
                &legacy,
                true,
                Trigger::Schedule,
                ts("2026-03-01T00:00:00Z")
            )
            .is_err()
        );
        assert!(
            eligibility(
                &it,
                &legacy,
                true,
                Trigger::Schedule,
                ts("2026-04-02T00:00:00Z")
            )
            .is_ok()
        );
    }

    #[test]
    fn the_rules_are_checked_in_order_and_request_skips_them_and_sales_the_flag() {
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
        // A sales run keeps the period (`now` is after this item's sales) ...
        assert_eq!(
            check(&it, false, Trigger::Sales),
            Err((
                KeptReason::OutsideDynamicPricingPeriod,
                Some(it.properties.sales_period)
            ))
        );
        // ... but not the active flag, which is scheduled pricing's (INTERFACE.md).
        let inside = it.properties.sales_period.start;
        assert_eq!(
            eligibility(&it, &header, false, Trigger::Sales, inside),
            Ok(())
        );
        assert_eq!(
            eligibility(&it, &header, false, Trigger::Schedule, inside),
            Err((KeptReason::InstanceInactive, None))
        );
        it.properties.dynamic_pricing = false;
        assert_eq!(
            check(&it, true, Trigger::Request),
            Err((KeptReason::DynamicPricingOff, None))
        );
        it.properties.dynamic_pricing = true;
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
