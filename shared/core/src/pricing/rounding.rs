//! Money arithmetic of the engine: scaling by a factor, bounds, the step cap and rounding
//! to a price step, all on integer millionths so that no float drift reaches a price.
//!
//! A factor (multiplier, M, ratio) is a float; the product `value * factor` is rounded to
//! whole millionths once, and everything after that (clamping, capping, rounding to the
//! step) is exact integer arithmetic.

use serde::{Deserialize, Serialize};

use crate::money::Money;

/// Which bound of `[min, max]` was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Bound {
    Min,
    Max,
}

fn saturate(v: i128) -> Money {
    Money::from_micros(v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// `value * factor`, rounded to the nearest millionth (half away from zero). Saturates at
/// `Money::MIN`/`Money::MAX`, so a runaway factor never puts an amount the API itself would
/// refuse into an explanation; a NaN factor gives zero (the bounds then decide the price).
pub fn scale(value: Money, factor: f64) -> Money {
    // Exact for |micros| < 2^53, i.e. amounts below 9e9, which covers every valid Money.
    let x = value.micros() as f64 * factor;
    // `as` saturates and maps NaN to 0.
    Money::from_micros(round_half_away(x) as i64).saturate()
}

/// `x` rounded to a whole number, halves away from zero, where a half missed by a few
/// units in the last place counts as the half it is in decimals: a factor such as 2.05
/// is a float a little under it, so 3.17609 * 2.05 came to 6510984.4999999 millionths and
/// rounded down, where the decimal product 6.5109845 rounds up (an outside probe).
fn round_half_away(x: f64) -> f64 {
    let below = x.abs().trunc();
    let fraction = x.abs() - below;
    // A few units in the last place; where those reach whole millionths (amounts past
    // about a billion), a float holds no fraction to judge, and it rounds as it is.
    let tolerance = 8.0 * f64::EPSILON * x.abs().max(1.0);
    if tolerance < 0.01 && (fraction - 0.5).abs() <= tolerance {
        (below + 1.0).copysign(x)
    } else {
        x.round()
    }
}

/// `value * factor + offset`, rounded to the nearest millionth, saturating only once the
/// whole is computed ([`scale`] then an addition would saturate the product first: a
/// product past `Money::MAX` with a large negative offset came out far below the sum).
pub fn scale_offset(value: Money, factor: f64, offset: Money) -> Money {
    let x = value.micros() as f64 * factor + offset.micros() as f64;
    Money::from_micros(round_half_away(x) as i64).saturate()
}

/// Clamps `value` to `[min, max]` and says which bound applied. Expects `min <= max`.
pub fn clamp(value: Money, min: Money, max: Money) -> (Money, Option<Bound>) {
    if value < min {
        (min, Some(Bound::Min))
    } else if value > max {
        (max, Some(Bound::Max))
    } else {
        (value, None)
    }
}

/// Caps the change of `value` against `previous` to `limit` (a fraction: 0.1 = 10 %).
/// Returns the capped value and whether the cap applied.
pub fn cap_step_change(value: Money, previous: Money, limit: f64) -> (Money, bool) {
    if !(limit.is_finite() && limit >= 0.0) {
        return (value, false);
    }
    let upper = scale(previous, 1.0 + limit);
    let lower = scale(previous, 1.0 - limit);
    let (lo, hi) = if lower <= upper {
        (lower, upper)
    } else {
        (upper, lower)
    };
    if value > hi {
        (hi, true)
    } else if value < lo {
        (lo, true)
    } else {
        (value, false)
    }
}

/// Rounds to the nearest multiple of `step`, halves away from zero. A step that is not
/// positive leaves the value as it is.
pub fn round_to_step(value: Money, step: Money) -> Money {
    let s = step.micros() as i128;
    if s <= 0 {
        return value;
    }
    let v = value.micros() as i128;
    let (a, sign) = if v < 0 { (-v, -1) } else { (v, 1) };
    let q = a / s;
    let r = a % s;
    let q = if 2 * r >= s { q + 1 } else { q };
    saturate(sign * q * s)
}

/// The largest multiple of `step` at or below `value` (`step` > 0).
fn floor_to_step(value: Money, step: Money) -> Money {
    let s = step.micros() as i128;
    saturate((value.micros() as i128).div_euclid(s) * s)
}

/// The smallest multiple of `step` at or above `value` (`step` > 0).
fn ceil_to_step(value: Money, step: Money) -> Money {
    let s = step.micros() as i128;
    saturate(-((-(value.micros() as i128)).div_euclid(s) * s))
}

/// The multiple of `step` next to `value` on the side of `toward`: at or below `value` when
/// `toward` is below it, at or above it otherwise (`step` > 0; a step that is not positive
/// leaves the value as it is).
fn round_toward(value: Money, toward: Money, step: Money) -> Money {
    if step.micros() <= 0 {
        value
    } else if toward < value {
        floor_to_step(value, step)
    } else {
        ceil_to_step(value, step)
    }
}

/// The result of [`round_within`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rounded {
    pub value: Money,
    /// Set when rounding left `[min, max]` and the value was moved back inside: to the
    /// nearest step multiple inside the bounds, or to the bound itself when none fits.
    pub reclamped: Option<Bound>,
}

/// Rounds a value that lies in `[min, max]` to `step` without leaving the bounds: when the
/// nearest multiple is outside, the nearest multiple inside is taken, and when no multiple
/// of the step lies inside the bounds, the bound itself.
pub fn round_within(value: Money, step: Money, min: Money, max: Money) -> Rounded {
    let r = round_to_step(value, step);
    if step.micros() <= 0 {
        let (value, reclamped) = clamp(r, min, max);
        return Rounded { value, reclamped };
    }
    if r > max {
        let inside = floor_to_step(max, step);
        let value = if inside >= min { inside } else { max };
        Rounded {
            value,
            reclamped: Some(Bound::Max),
        }
    } else if r < min {
        let inside = ceil_to_step(min, step);
        let value = if inside <= max { inside } else { min };
        Rounded {
            value,
            reclamped: Some(Bound::Min),
        }
    } else {
        Rounded {
            value: r,
            reclamped: None,
        }
    }
}

/// [`round_within`], kept within the step cap `cap` (the previous price and the largest
/// relative change) where a step allows: when the nearest multiple is past the cap, the
/// one on the previous price's side is taken if it is within the cap and the bounds (a
/// 15 % cap from 10 is 11.5, which rounds to 12 with a step of 1: 11 instead). Where no
/// multiple lies within the cap, the nearest one stays. Where no multiple lies within the
/// bounds at all (so the price is a bound), the other bound is taken when the nearest one
/// is past the cap and it is not (bounds 101 and 109 with a step of 10, a 5 % cap from
/// 101: 101, not 109; an outside probe saw the price jump from bound to bound).
pub fn round_within_cap(
    value: Money,
    step: Money,
    min: Money,
    max: Money,
    cap: Option<(Money, f64)>,
) -> Rounded {
    let mut rounded = round_within(value, step, min, max);
    if let Some((previous, limit)) = cap {
        let past = |v: Money| cap_step_change(v, previous, limit).1;
        if past(rounded.value) {
            let toward = round_toward(value, previous, step);
            if (min..=max).contains(&toward) && !past(toward) {
                rounded.value = toward;
            } else if step.micros() > 0 && floor_to_step(max, step) < min {
                let (other, bound) = if rounded.value == max {
                    (min, Bound::Min)
                } else {
                    (max, Bound::Max)
                };
                if !past(other) {
                    rounded = Rounded {
                        value: other,
                        reclamped: Some(bound),
                    };
                }
            }
        }
    }
    rounded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Money {
        Money::from_f64(s.parse().unwrap()).unwrap()
    }

    #[test]
    fn rounds_half_away_from_zero_to_any_step() {
        let cases = [
            ("1.025", "0.05", "1.05"),
            ("1.024999", "0.05", "1"),
            ("1.075", "0.05", "1.1"),
            ("10.25", "0.5", "10.5"),
            ("10.249999", "0.5", "10"),
            ("10.75", "0.5", "11"),
            ("2.5", "1", "3"),
            ("3.5", "1", "4"),
            ("2.499999", "1", "2"),
            ("0.005", "0.01", "0.01"),
            ("0.004999", "0.01", "0"),
            ("19.99", "0.01", "19.99"),
            ("0", "0.05", "0"),
            // A step that is not a "nice" number.
            ("1.005", "0.03", "1.02"),
            ("1.004999", "0.03", "0.99"),
        ];
        for (v, step, want) in cases {
            assert_eq!(round_to_step(m(v), m(step)), m(want), "{v} to {step}");
        }
        // Negative values mirror positive ones.
        assert_eq!(round_to_step(m("-2.5"), m("1")), m("-3"));
        assert_eq!(round_to_step(m("-1.025"), m("0.05")), m("-1.05"));
        // A zero step keeps the value.
        assert_eq!(round_to_step(m("1.234567"), Money::ZERO), m("1.234567"));
    }

    #[test]
    fn a_scaled_amount_with_an_offset_saturates_only_as_a_whole() {
        // As before for amounts in range: the product rounded to the micro, the offset added.
        assert_eq!(scale_offset(m("12.5"), 1.1, m("-2.5")), m("11.25"));
        assert_eq!(scale_offset(m("0.000001"), 0.5, Money::ZERO), m("0.000001"));
        // 50 * 2e8 = 1e10 is past Money::MAX, but minus 5e9 the sum is in range.
        assert_eq!(
            scale_offset(m("50"), 2e8, m("-5000000000")),
            m("5000000000")
        );
        // A product far past the range with the largest negative offset is still far past
        // it: the max, not the min.
        assert_eq!(scale_offset(Money::MAX, 1.7e308, Money::MIN), Money::MAX);
        assert_eq!(scale_offset(m("10"), f64::NAN, m("3")), Money::ZERO);
    }

    #[test]
    fn rounding_never_leaves_bounds_that_are_not_step_multiples() {
        // [10.20, 10.80] with step 0.5: 10.76 rounds to 11 -> back to 10.5.
        let r = round_within(m("10.76"), m("0.5"), m("10.2"), m("10.8"));
        assert_eq!(r.value, m("10.5"));
        assert_eq!(r.reclamped, Some(Bound::Max));
        // 10.21 rounds to 10 -> up to 10.5.
        let r = round_within(m("10.21"), m("0.5"), m("10.2"), m("10.8"));
        assert_eq!(r.value, m("10.5"));
        assert_eq!(r.reclamped, Some(Bound::Min));
        // No multiple of 1 inside [10.2, 10.8]: the bound itself.
        let r = round_within(m("10.7"), m("1"), m("10.2"), m("10.8"));
        assert_eq!((r.value, r.reclamped), (m("10.8"), Some(Bound::Max)));
        let r = round_within(m("10.3"), m("1"), m("10.2"), m("10.8"));
        assert_eq!((r.value, r.reclamped), (m("10.2"), Some(Bound::Min)));
        // The half step at the bound: 10.75 -> 11 > 10.8 -> 10.5 (nearest inside).
        let r = round_within(m("10.75"), m("0.5"), m("10.2"), m("10.8"));
        assert_eq!(r.value, m("10.5"));
        // Inside and a multiple: untouched.
        let r = round_within(m("10.5"), m("0.5"), m("10.2"), m("10.8"));
        assert_eq!((r.value, r.reclamped), (m("10.5"), None));
        // min == max, not a multiple: the bound.
        let r = round_within(m("9.99"), m("0.05"), m("9.99"), m("9.99"));
        assert_eq!(r.value, m("9.99"));
        // Step 0.05 with bounds 0.97..1.03: 1.025 -> 1.05 > 1.03 -> 1.00.
        let r = round_within(m("1.025"), m("0.05"), m("0.97"), m("1.03"));
        assert_eq!(r.value, m("1"));
    }

    #[test]
    fn scaling_has_no_float_drift() {
        // 0.1 * 3 is 0.30000000000000004 in floats; in millionths it is exact.
        assert_eq!(scale(m("0.1"), 3.0), m("0.3"));
        assert_eq!(scale(m("10"), 1.1), m("11"));
        assert_eq!(scale(m("19.99"), 1.025), m("20.48975"));
        assert_eq!(scale(m("1"), 1.025), m("1.025"));
        assert_eq!(round_to_step(scale(m("1"), 1.025), m("0.05")), m("1.05"));
        assert_eq!(scale(m("1"), f64::NAN), Money::ZERO);
        assert_eq!(scale(m("1"), f64::INFINITY), Money::MAX);
        assert_eq!(scale(m("1"), f64::NEG_INFINITY), Money::MIN);
        assert_eq!(scale(m("1"), 1e12), Money::MAX);
    }

    #[test]
    fn a_decimal_half_missed_by_float_error_rounds_away_from_zero() {
        // 3.17609 * 2.05 = 6.5109845 in decimals; 6510984.4999999 millionths in floats.
        assert_eq!(scale(m("3.17609"), 2.05), m("6.510985"));
        assert_eq!(scale(m("2.74999"), 2.05), m("5.637480"));
        assert_eq!(scale(m("-3.17609"), 2.05), m("-6.510985"));
        // Not a half: as before.
        assert_eq!(scale(m("3.17609"), 2.0), m("6.35218"));
        assert_eq!(scale(m("1"), 1.0000004), m("1"));
        assert_eq!(scale(m("1"), 1.0000006), m("1.000001"));
        assert_eq!(scale_offset(m("3.17609"), 2.05, m("1")), m("7.510985"));
    }

    #[test]
    fn step_change_is_capped_both_ways() {
        assert_eq!(cap_step_change(m("150"), m("100"), 0.1), (m("110"), true));
        assert_eq!(cap_step_change(m("50"), m("100"), 0.1), (m("90"), true));
        assert_eq!(cap_step_change(m("105"), m("100"), 0.1), (m("105"), false));
        assert_eq!(cap_step_change(m("110"), m("100"), 0.1), (m("110"), false));
        // A limit above 100 % lets the price fall to anything down to zero.
        assert_eq!(cap_step_change(m("0"), m("100"), 2.0), (m("0"), false));
        assert_eq!(
            cap_step_change(m("50"), m("100"), f64::NAN),
            (m("50"), false)
        );
    }

    #[test]
    fn rounding_keeps_the_cap_where_a_step_or_a_bound_allows() {
        let capped = |value: &str, step: &str, min: &str, max: &str, previous: &str, limit| {
            let r = round_within_cap(
                m(value),
                m(step),
                m(min),
                m(max),
                Some((m(previous), limit)),
            );
            (r.value, r.reclamped)
        };
        // The nearest step past the cap: the one on the previous price's side.
        assert_eq!(capped("11.5", "1", "0", "100", "10", 0.15), (m("11"), None));
        // No step within the bounds: the bound within the cap, not the far one.
        assert_eq!(
            capped("106", "10", "101", "109", "101", 0.05),
            (m("101"), Some(Bound::Min))
        );
        assert_eq!(
            capped("104", "10", "101", "109", "109", 0.05),
            (m("109"), Some(Bound::Max))
        );
        assert_eq!(
            capped("12.5", "1", "12.4", "12.6", "12.4", 0.01),
            (m("12.4"), Some(Bound::Min))
        );
        // Both bounds within the cap: the nearest, as without one.
        assert_eq!(
            capped("106", "10", "101", "109", "105", 0.1),
            (m("109"), Some(Bound::Max))
        );
        // Neither within it: the nearest stays.
        assert_eq!(
            capped("106", "10", "101", "109", "200", 0.01),
            (m("109"), Some(Bound::Max))
        );
    }

    #[test]
    fn clamp_names_the_bound() {
        assert_eq!(clamp(m("5"), m("10"), m("20")), (m("10"), Some(Bound::Min)));
        assert_eq!(
            clamp(m("25"), m("10"), m("20")),
            (m("20"), Some(Bound::Max))
        );
        assert_eq!(clamp(m("15"), m("10"), m("20")), (m("15"), None));
    }
}
