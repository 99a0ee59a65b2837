//! Trigger helpers: sales thresholds and schedule slots.

use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone};
use serde::{Deserialize, Serialize};

use crate::entry::Schedule;
use crate::time::Timestamp;

/// Whether the sold percent moved from one band `[k * step, (k + 1) * step)` to another
/// between `sold_before` and `sold_after`, i.e. crossed a multiple of `step` upward (reaching
/// it counts) or downward (falling below it). `step` is in percent (`soldPercentStep`,
/// 0 < step <= 100) and is taken to the millionth of a percent, so the test is exact.
/// Without a capacity (0) or a step there is no percent and nothing is crossed.
pub fn sold_percent_crossed(step: f64, sold_before: u64, sold_after: u64, capacity: u64) -> bool {
    if capacity == 0 || !(step.is_finite() && step > 0.0) {
        return false;
    }
    // Step in millionths of a percent; band = floor(sold * 100 / capacity / step).
    let step_u = (step * 1e6).round() as u128;
    if step_u == 0 {
        return false;
    }
    let band = |sold: u64| sold as u128 * 100 * 1_000_000 / (capacity as u128 * step_u);
    band(sold_before) != band(sold_after)
}

/// The scheduled slot at or before `now` and the one after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSlots {
    /// The latest slot at or before `now`: key scheduled runs by (instance, current).
    pub current: Timestamp,
    /// The first slot after `now`.
    pub next: Timestamp,
}

/// The schedule in force when an instance has none: every 60 minutes.
pub const DEFAULT_INTERVAL_SECONDS: u64 = 3_600;

/// The instance time zone: an IANA name; absent or unknown = UTC.
pub fn instance_zone(time_zone: Option<&str>) -> TimeZone {
    time_zone
        .and_then(|z| TimeZone::get(z).ok())
        .unwrap_or(TimeZone::UTC)
}

/// The slots of `schedule` around `now` (`None` = every 60 minutes).
///
/// - An interval counts from the Unix epoch (1970-01-01T00:00:00Z): slots are the multiples
///   of the interval, whatever the zone (intervals dividing a day fall on round UTC times).
/// - Times of day are wall-clock times in the instance zone (`time_zone`, UTC when absent
///   or unknown). A time that does not exist on a day (DST gap) runs as late as the clock
///   jumped (02:30 on a day the clock jumps from 02:00 to 03:00 runs at 03:30: the
///   instant 02:30 would have been at the offset before the jump), so a daily schedule
///   never loses a day; an ambiguous time (DST overlap) runs once, at its first
///   occurrence.
/// - A schedule with no usable value (an interval of 0, no time below 24:00) falls back to
///   the default.
pub fn schedule_slots(
    schedule: Option<&Schedule>,
    time_zone: Option<&str>,
    now: Timestamp,
) -> ScheduleSlots {
    match schedule {
        Some(Schedule::TimesOfDay(minutes)) => {
            let tz = instance_zone(time_zone);
            let mut minutes: Vec<u16> = minutes.iter().copied().filter(|&m| m < 1440).collect();
            minutes.sort_unstable();
            minutes.dedup();
            times_of_day(&minutes, &tz, now)
                .unwrap_or_else(|| interval_slots(DEFAULT_INTERVAL_SECONDS, now))
        }
        Some(Schedule::IntervalSeconds(s)) if *s > 0 => interval_slots(*s, now),
        _ => interval_slots(DEFAULT_INTERVAL_SECONDS, now),
    }
}

fn interval_slots(seconds: u64, now: Timestamp) -> ScheduleSlots {
    // Submission refuses longer intervals; one stored before that rule is read as the
    // longest (a slot past what the clock holds was `now`, due at every tick).
    let seconds = seconds.min(crate::entry::MAX_SCHEDULE_INTERVAL_SECONDS);
    let step = i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let ms = now.millis();
    let current = ms - ms.rem_euclid(step);
    let at = |ms: i64| Timestamp::from_millis(ms).unwrap_or(now);
    ScheduleSlots {
        current: at(current),
        next: at(current.saturating_add(step)),
    }
}

/// The slot instants of one local day, in order. A time in a gap is read at the offset
/// before the jump (as late as the clock jumped), an ambiguous one at its first occurrence.
fn day_slots<'a>(
    minutes: &'a [u16],
    tz: &'a TimeZone,
    day: Date,
) -> impl Iterator<Item = Timestamp> + 'a {
    minutes.iter().filter_map(move |&m| {
        let wall = day.at((m / 60) as i8, (m % 60) as i8, 0, 0);
        let offset = match tz.to_ambiguous_timestamp(wall).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset,
            AmbiguousOffset::Gap { before, .. } => before,
            AmbiguousOffset::Fold { before, .. } => before,
        };
        let instant = offset.to_timestamp(wall).ok()?;
        Timestamp::from_millis(instant.as_millisecond())
    })
}

fn times_of_day(minutes: &[u16], tz: &TimeZone, now: Timestamp) -> Option<ScheduleSlots> {
    if minutes.is_empty() {
        return None;
    }
    let today = jiff::Timestamp::from_millisecond(now.millis())
        .ok()?
        .to_zoned(tz.clone())
        .date();
    // A day may have no slot before or after `now`, so look a few days each way.
    let mut current = None;
    for back in 0..=3i32 {
        let day = today.checked_sub(jiff::Span::new().days(back)).ok()?;
        if let Some(t) = day_slots(minutes, tz, day).filter(|t| *t <= now).max() {
            current = Some(t);
            break;
        }
    }
    let mut next = None;
    for ahead in 0..=3i32 {
        let day = today.checked_add(jiff::Span::new().days(ahead)).ok()?;
        if let Some(t) = day_slots(minutes, tz, day).filter(|t| *t > now).min() {
            next = Some(t);
            break;
        }
    }
    Some(ScheduleSlots {
        current: current?,
        next: next?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn slots(schedule: Option<&Schedule>, tz: Option<&str>, now: &str) -> (String, String) {
        let s = schedule_slots(schedule, tz, ts(now));
        (s.current.to_rfc3339(), s.next.to_rfc3339())
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_owned(), b.to_owned())
    }

    #[test]
    fn crossing_a_multiple_of_the_step() {
        // 100 seats, step 5 %.
        assert!(sold_percent_crossed(5.0, 4, 5, 100)); // reaching 5 %
        assert!(!sold_percent_crossed(5.0, 5, 9, 100)); // inside 5..10 %
        assert!(sold_percent_crossed(5.0, 9, 10, 100));
        assert!(sold_percent_crossed(5.0, 3, 27, 100)); // several at once
        assert!(sold_percent_crossed(5.0, 5, 4, 100)); // a return below 5 %
        assert!(!sold_percent_crossed(5.0, 7, 5, 100)); // still in 5..10 %
        assert!(!sold_percent_crossed(5.0, 0, 4, 100));
        assert!(!sold_percent_crossed(5.0, 4, 4, 100));
        // Oversold keeps crossing bands past 100 %.
        assert!(sold_percent_crossed(5.0, 104, 105, 100));
        // Fractional steps are exact: 0.1 % of 1000 seats is 1 seat.
        assert!(sold_percent_crossed(0.1, 2, 3, 1000));
        assert!(sold_percent_crossed(2.5, 2, 3, 120)); // 2.5 % of 120 = 3 seats
        assert!(!sold_percent_crossed(2.5, 3, 5, 120)); // 2.5..4.17 %
        // 1/3 of 3 seats is 33.33 %: step 33.333333 crosses at 1 seat sold.
        assert!(sold_percent_crossed(100.0 / 3.0, 0, 1, 3));
        // No capacity or no step: nothing to cross.
        assert!(!sold_percent_crossed(5.0, 0, 10, 0));
        assert!(!sold_percent_crossed(0.0, 0, 10, 100));
        assert!(!sold_percent_crossed(f64::NAN, 0, 10, 100));
    }

    #[test]
    fn interval_slots_count_from_the_epoch() {
        let fifteen = Schedule::IntervalSeconds(900);
        assert_eq!(
            slots(Some(&fifteen), None, "2026-03-29T10:07:30Z"),
            pair("2026-03-29T10:00:00Z", "2026-03-29T10:15:00Z")
        );
        // Exactly on a slot: that slot is current.
        assert_eq!(
            slots(Some(&fifteen), None, "2026-03-29T10:15:00Z"),
            pair("2026-03-29T10:15:00Z", "2026-03-29T10:30:00Z")
        );
        // The zone does not move interval slots.
        assert_eq!(
            slots(Some(&fifteen), Some("Asia/Kolkata"), "2026-03-29T10:07:30Z"),
            pair("2026-03-29T10:00:00Z", "2026-03-29T10:15:00Z")
        );
        // An interval longer than submission takes (stored before the rule) is read as
        // the longest, 366 days: its next slot is in the future, not `now`.
        let huge = Schedule::IntervalSeconds(9_999_999_999 * 7 * 86_400);
        let s = schedule_slots(Some(&huge), None, ts("2026-03-29T10:07:30Z"));
        assert!(s.next > ts("2026-03-29T10:07:30Z"), "{s:?}");
        assert_eq!(
            (s.next.millis() - s.current.millis()) / 1000,
            366 * 86_400,
            "{s:?}"
        );
        // No schedule: hourly.
        assert_eq!(
            slots(None, Some("Europe/Berlin"), "2026-03-29T10:59:59.999Z"),
            pair("2026-03-29T10:00:00Z", "2026-03-29T11:00:00Z")
        );
        // An unusable interval falls back to hourly.
        assert_eq!(
            slots(
                Some(&Schedule::IntervalSeconds(0)),
                None,
                "2026-03-29T10:30:00Z"
            ),
            pair("2026-03-29T10:00:00Z", "2026-03-29T11:00:00Z")
        );
    }

    #[test]
    fn times_of_day_are_in_the_instance_zone() {
        // 09:00 and 18:30 in Berlin (UTC+1 in winter).
        let s = Schedule::TimesOfDay(vec![9 * 60, 18 * 60 + 30]);
        let berlin = Some("Europe/Berlin");
        assert_eq!(
            slots(Some(&s), berlin, "2026-01-15T12:00:00Z"),
            pair("2026-01-15T08:00:00Z", "2026-01-15T17:30:00Z")
        );
        // Before the first time of the day: yesterday's last one.
        assert_eq!(
            slots(Some(&s), berlin, "2026-01-15T07:00:00Z"),
            pair("2026-01-14T17:30:00Z", "2026-01-15T08:00:00Z")
        );
        // After the last: tomorrow's first.
        assert_eq!(
            slots(Some(&s), berlin, "2026-01-15T20:00:00Z"),
            pair("2026-01-15T17:30:00Z", "2026-01-16T08:00:00Z")
        );
        // Summer time: UTC+2.
        assert_eq!(
            slots(Some(&s), berlin, "2026-07-01T12:00:00Z"),
            pair("2026-07-01T07:00:00Z", "2026-07-01T16:30:00Z")
        );
        // No zone or an unknown one: UTC.
        assert_eq!(
            slots(Some(&s), None, "2026-01-15T12:00:00Z"),
            pair("2026-01-15T09:00:00Z", "2026-01-15T18:30:00Z")
        );
        assert_eq!(
            slots(Some(&s), Some("Mars/Olympus"), "2026-01-15T12:00:00Z"),
            pair("2026-01-15T09:00:00Z", "2026-01-15T18:30:00Z")
        );
    }

    #[test]
    fn a_time_in_the_spring_gap_runs_as_late_as_the_clock_jumped() {
        // Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist. It runs
        // at 03:30 CEST (01:30Z, 02:30 at the CET offset): a daily schedule at 02:30 used
        // to skip that day, 48 hours without a scheduled run.
        let s = Schedule::TimesOfDay(vec![2 * 60 + 30, 12 * 60]);
        let berlin = Some("Europe/Berlin");
        assert_eq!(
            slots(Some(&s), berlin, "2026-03-29T05:00:00Z"),
            pair("2026-03-29T01:30:00Z", "2026-03-29T10:00:00Z")
        );
        // The day before: noon CET = 11:00Z, and the next slot is the gap day's 03:30.
        assert_eq!(
            slots(Some(&s), berlin, "2026-03-28T12:00:00Z"),
            pair("2026-03-28T11:00:00Z", "2026-03-29T01:30:00Z")
        );
        // The next day 02:30 exists again, in CEST (00:30Z).
        assert_eq!(
            slots(Some(&s), berlin, "2026-03-29T23:00:00Z"),
            pair("2026-03-29T10:00:00Z", "2026-03-30T00:30:00Z")
        );
        // A schedule whose only time falls in the gap still runs that day.
        let only = Schedule::TimesOfDay(vec![2 * 60 + 30]);
        assert_eq!(
            slots(Some(&only), berlin, "2026-03-29T12:00:00Z"),
            pair("2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z")
        );
        // 02:00, the instant of the jump itself, runs at 03:00 CEST (01:00Z).
        let two = Schedule::TimesOfDay(vec![2 * 60]);
        assert_eq!(
            slots(Some(&two), berlin, "2026-03-29T01:00:00Z"),
            pair("2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z")
        );
    }

    #[test]
    fn an_ambiguous_autumn_time_runs_once_at_its_first_occurrence() {
        // Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice
        // (00:30Z in CEST, 01:30Z in CET). Only the first is a slot.
        let s = Schedule::TimesOfDay(vec![2 * 60 + 30]);
        let berlin = Some("Europe/Berlin");
        assert_eq!(
            slots(Some(&s), berlin, "2026-10-25T00:00:00Z"),
            pair("2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z")
        );
        // Between the two occurrences and after the second: the slot stays the first one.
        assert_eq!(
            slots(Some(&s), berlin, "2026-10-25T01:00:00Z"),
            pair("2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z")
        );
        assert_eq!(
            slots(Some(&s), berlin, "2026-10-25T01:30:00Z"),
            pair("2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z")
        );
    }

    #[test]
    fn slots_are_stable_within_a_slot() {
        let s = Schedule::TimesOfDay(vec![0, 6 * 60, 12 * 60, 18 * 60]);
        let a = schedule_slots(
            Some(&s),
            Some("America/New_York"),
            ts("2026-11-01T13:00:00Z"),
        );
        let b = schedule_slots(
            Some(&s),
            Some("America/New_York"),
            ts("2026-11-01T16:59:59Z"),
        );
        assert_eq!(a, b);
        assert!(a.current <= ts("2026-11-01T13:00:00Z") && ts("2026-11-01T16:59:59Z") < a.next);
    }
}
