//! Timestamps, periods and the durations used by schedules.

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, UTC on the wire (RFC 3339).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

impl Timestamp {
    pub fn now() -> Self {
        Self(Utc::now())
    }

    /// An RFC 3339 time, normalised to UTC. Refused (`None`) when its UTC form is outside
    /// the years 0000 to 9999, which RFC 3339 cannot write (`9999-12-31T23:59:59-23:59` is
    /// `+10000-…` in UTC: stored so, it no longer read back). A leap second (`23:59:60`) is
    /// read as the first instant after `23:59:59.999…`, the next second: a time written
    /// back must parse again, and SQLite's date functions, like most readers, have no
    /// second 60.
    pub fn parse(s: &str) -> Option<Self> {
        let utc = DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc);
        let nanos = utc.timestamp_subsec_nanos();
        let utc = if nanos >= 1_000_000_000 {
            DateTime::from_timestamp(utc.timestamp(), 0)?
                + chrono::Duration::nanoseconds(i64::from(nanos))
        } else {
            utc
        };
        (0..=9999).contains(&utc.year()).then_some(Self(utc))
    }

    /// The last millisecond [`Timestamp::parse`] reads: the end of 9999-12-31 UTC.
    pub const LAST_MILLIS: i64 = 253_402_300_799_999;

    pub fn from_millis(ms: i64) -> Option<Self> {
        DateTime::from_timestamp_millis(ms).map(Self)
    }

    pub fn millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// This time, or a nanosecond after `earlier` when this is not past it (a clock that
    /// did not move, or moved back): what a record written after one stamped `earlier` is
    /// stamped, so that its stamp always changes.
    pub fn at_least_after(self, earlier: Self) -> Self {
        if self > earlier {
            self
        } else {
            Self(earlier.0 + chrono::Duration::nanoseconds(1))
        }
    }

    pub fn to_rfc3339(&self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom("expected an RFC 3339 timestamp"))
    }
}

/// A half-open period `[start, end)` with `start < end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    pub start: Timestamp,
    pub end: Timestamp,
}

impl Period {
    pub fn new(start: Timestamp, end: Timestamp) -> Option<Self> {
        (start < end).then_some(Self { start, end })
    }

    pub fn contains(&self, t: Timestamp) -> bool {
        self.start <= t && t < self.end
    }
}

/// Parses the subset of ISO 8601 durations a schedule needs: `PnDTnHnMnS` and `PnW`.
/// Returns whole seconds.
pub fn parse_iso_duration(s: &str) -> Option<u64> {
    let rest = s.strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return None,
        None => (rest, None),
    };
    let mut total: u64 = 0;
    let mut take = |part: &str, units: &[(char, u64)]| -> Option<()> {
        let mut num = String::new();
        let mut unit_index = 0;
        for c in part.chars() {
            if c.is_ascii_digit() {
                num.push(c);
                continue;
            }
            let pos = units[unit_index..].iter().position(|(u, _)| *u == c)?;
            unit_index += pos;
            let n: u64 = num.parse().ok()?;
            total = total.checked_add(n.checked_mul(units[unit_index].1)?)?;
            unit_index += 1;
            num.clear();
        }
        num.is_empty().then_some(())
    };
    take(date, &[('W', 604_800), ('D', 86_400)])?;
    if let Some(t) = time {
        take(t, &[('H', 3_600), ('M', 60), ('S', 1)])?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_normalise_to_utc() {
        let t = Timestamp::parse("2026-01-01T12:00:00+02:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-01-01T10:00:00Z");
        assert!(Timestamp::parse("2026-01-01").is_none());
    }

    #[test]
    fn a_time_is_one_rfc_3339_can_write_back() {
        // Valid RFC 3339 whose UTC form falls outside 0000-9999: stored as `+10000-…`,
        // it no longer parsed, and every read of the instance was a 500.
        assert!(Timestamp::parse("9999-12-31T23:59:59-23:59").is_none());
        assert!(Timestamp::parse("0000-01-01T00:00:00+00:01").is_none());
        let last = Timestamp::parse("9999-12-31T23:59:59.999Z").unwrap();
        assert_eq!(last.millis(), Timestamp::LAST_MILLIS);
        assert_eq!(Timestamp::parse(&last.to_rfc3339()), Some(last));
        let first = Timestamp::parse("0000-01-01T00:00:00Z").unwrap();
        assert_eq!(Timestamp::parse(&first.to_rfc3339()), Some(first));
        // A leap second is the next second's start, and writes back as such.
        let leap = Timestamp::parse("2026-12-31T23:59:60Z").unwrap();
        assert_eq!(leap.to_rfc3339(), "2027-01-01T00:00:00Z");
        let leap = Timestamp::parse("2030-06-30T23:59:60.5+02:00").unwrap();
        assert_eq!(leap.to_rfc3339(), "2030-06-30T22:00:00.500Z");
        assert_eq!(Timestamp::parse(&leap.to_rfc3339()), Some(leap));
    }

    #[test]
    fn periods_need_start_before_end() {
        let a = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let b = Timestamp::parse("2026-01-02T00:00:00Z").unwrap();
        assert!(Period::new(a, b).is_some());
        assert!(Period::new(b, a).is_none());
        assert!(Period::new(a, a).is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_iso_duration("PT1M"), Some(60));
        assert_eq!(parse_iso_duration("PT1H30M"), Some(5_400));
        assert_eq!(parse_iso_duration("P1DT1S"), Some(86_401));
        assert_eq!(parse_iso_duration("P2W"), Some(1_209_600));
        assert_eq!(parse_iso_duration("PT"), None);
        assert_eq!(parse_iso_duration("P"), None);
        assert_eq!(parse_iso_duration("PT1M1H"), None);
        assert_eq!(parse_iso_duration("1M"), None);
        assert_eq!(parse_iso_duration("PT5X"), None);
    }
}
