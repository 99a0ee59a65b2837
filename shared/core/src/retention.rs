//! The retention policy (issue 12, item 3): how long records that only grow are kept.
//!
//! The entry log is the source of truth and is never pruned; everything here can be told
//! again from it or is a record of work done. Each class has its own period, counted from
//! the record's own time, and `None` keeps that class for ever. What a guarantee needs is
//! never pruned, whatever its age:
//!
//! - `calculations`: a calculation other than an instance's latest (its id, trigger, time
//!   and, where a store keeps one, its snapshot of prices). The latest calculation (the
//!   current prices) is never pruned. A calculation id dedupes a replayed calculation
//!   message only while it is kept: the minimum period outlasts any queued message.
//! - `price_history`: an item's history entries older than the horizon, except its latest
//!   entry (it explains the item's current price).
//! - `deliveries`: final webhook deliveries (succeeded, or failed after the whole retry
//!   schedule), counted from their creation. A pending or retrying delivery is never
//!   pruned.
//! - `events`: dispatched events (their deliveries hold their own copy). An event not yet
//!   handed to the subscriptions is never pruned by the standalone's pruning step.
//!
//! Defaults and their reasons are in docs/retention.md and the README.

use std::time::Duration;

use crate::time::Timestamp;

const DAY: u64 = 86_400;

/// The shortest period a class may be kept (0 keeps it for ever): longer than any message
/// waits in a queue (SQS keeps one at most 14 days), so a replayed calculation or delivery
/// message still finds what dedupes it, and far longer than the whole webhook retry
/// schedule (about 31 hours).
pub const MIN_DAYS: u64 = 14;

/// Default days per class (see [`Retention::default`]).
pub const DEFAULT_CALCULATIONS_DAYS: u64 = 90;
pub const DEFAULT_PRICE_HISTORY_DAYS: u64 = 180;
pub const DEFAULT_DELIVERIES_DAYS: u64 = 30;
pub const DEFAULT_EVENTS_DAYS: u64 = 90;

/// The classes of records the policy covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Calculations,
    PriceHistory,
    Deliveries,
    Events,
}

impl Class {
    pub const ALL: [Class; 4] = [
        Class::Calculations,
        Class::PriceHistory,
        Class::Deliveries,
        Class::Events,
    ];

    /// The name used in configuration and reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Calculations => "calculations",
            Class::PriceHistory => "priceHistory",
            Class::Deliveries => "deliveries",
            Class::Events => "events",
        }
    }

    pub fn default_days(self) -> u64 {
        match self {
            Class::Calculations => DEFAULT_CALCULATIONS_DAYS,
            Class::PriceHistory => DEFAULT_PRICE_HISTORY_DAYS,
            Class::Deliveries => DEFAULT_DELIVERIES_DAYS,
            Class::Events => DEFAULT_EVENTS_DAYS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    #[error(
        "retention of {class}: {days} days is below the minimum of {MIN_DAYS} (0 keeps it for ever)"
    )]
    TooShort { class: &'static str, days: u64 },
    #[error("retention of {class}: {days} days is too long")]
    TooLong { class: &'static str, days: u64 },
}

/// How long each class is kept; `None` keeps it for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub calculations: Option<Duration>,
    pub price_history: Option<Duration>,
    pub deliveries: Option<Duration>,
    pub events: Option<Duration>,
}

impl Default for Retention {
    /// Calculations 90 days, price history 180 days, deliveries 30 days, events 90 days.
    fn default() -> Self {
        Retention {
            calculations: Some(days(DEFAULT_CALCULATIONS_DAYS)),
            price_history: Some(days(DEFAULT_PRICE_HISTORY_DAYS)),
            deliveries: Some(days(DEFAULT_DELIVERIES_DAYS)),
            events: Some(days(DEFAULT_EVENTS_DAYS)),
        }
    }
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n * DAY)
}

impl Retention {
    /// Keeps everything for ever.
    pub const FOREVER: Retention = Retention {
        calculations: None,
        price_history: None,
        deliveries: None,
        events: None,
    };

    /// A class's period from a number of days: 0 keeps it for ever; otherwise at least
    /// [`MIN_DAYS`] and at most 100 years.
    pub fn period(class: Class, n: u64) -> Result<Option<Duration>, RetentionError> {
        match n {
            0 => Ok(None),
            n if n < MIN_DAYS => Err(RetentionError::TooShort {
                class: class.name(),
                days: n,
            }),
            n if n > 36_500 => Err(RetentionError::TooLong {
                class: class.name(),
                days: n,
            }),
            n => Ok(Some(days(n))),
        }
    }

    /// The policy from days per class (0 keeps a class for ever).
    pub fn from_days(
        calculations: u64,
        price_history: u64,
        deliveries: u64,
        events: u64,
    ) -> Result<Self, RetentionError> {
        Ok(Retention {
            calculations: Self::period(Class::Calculations, calculations)?,
            price_history: Self::period(Class::PriceHistory, price_history)?,
            deliveries: Self::period(Class::Deliveries, deliveries)?,
            events: Self::period(Class::Events, events)?,
        })
    }

    pub fn of(&self, class: Class) -> Option<Duration> {
        match class {
            Class::Calculations => self.calculations,
            Class::PriceHistory => self.price_history,
            Class::Deliveries => self.deliveries,
            Class::Events => self.events,
        }
    }

    /// Records of `class` made before this time are past retention at `now` (`None`:
    /// the class is kept for ever).
    pub fn cutoff(&self, class: Class, now: Timestamp) -> Option<Timestamp> {
        let keep = self.of(class)?;
        let ms = i64::try_from(keep.as_millis()).ok()?;
        Timestamp::from_millis(now.millis().saturating_sub(ms))
    }

    /// When a record of `class` made at `at` is past retention, in seconds since the
    /// epoch (the form of a DynamoDB TTL attribute); `None` when kept for ever.
    pub fn expires_at(&self, class: Class, at: Timestamp) -> Option<i64> {
        let keep = i64::try_from(self.of(class)?.as_secs()).ok()?;
        Some(at.millis().div_euclid(1000).saturating_add(keep))
    }

    /// Days per class as configured (0 = for ever), for logs and reports.
    pub fn describe(&self) -> String {
        Class::ALL
            .iter()
            .map(|c| {
                let d = self.of(*c).map_or(0, |d| d.as_secs() / DAY);
                format!("{}={}d", c.name(), d)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let r = Retention::default();
        assert_eq!(
            r.describe(),
            "calculations=90d priceHistory=180d deliveries=30d events=90d"
        );
        assert_eq!(Retention::from_days(90, 180, 30, 90), Ok(r));
    }

    #[test]
    fn zero_keeps_for_ever_and_short_periods_are_refused() {
        let r = Retention::from_days(0, 14, 0, 0).expect("valid");
        assert_eq!(r.calculations, None);
        assert_eq!(r.price_history, Some(Duration::from_secs(14 * DAY)));
        let e = Retention::from_days(90, 180, 13, 90).unwrap_err();
        assert_eq!(
            e.to_string(),
            "retention of deliveries: 13 days is below the minimum of 14 (0 keeps it for ever)"
        );
        assert!(Retention::from_days(40_000, 180, 30, 90).is_err());
    }

    #[test]
    fn cutoff_and_expiry() {
        let now = Timestamp::parse("2026-06-30T12:00:00Z").unwrap();
        let r = Retention::default();
        assert_eq!(
            r.cutoff(Class::Deliveries, now),
            Timestamp::parse("2026-05-31T12:00:00Z")
        );
        assert_eq!(Retention::FOREVER.cutoff(Class::Events, now), None);
        let at = Timestamp::parse("2026-01-01T00:00:00.900Z").unwrap();
        // 2026-01-01T00:00:00Z is 1767225600; 30 days later.
        assert_eq!(
            r.expires_at(Class::Deliveries, at),
            Some(1_767_225_600 + 30 * 86_400)
        );
        assert_eq!(Retention::FOREVER.expires_at(Class::Deliveries, at), None);
    }
}
