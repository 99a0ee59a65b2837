//! Money without float drift: an amount is an integer number of millionths.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const SCALE: i64 = 1_000_000;

/// An amount of money with at most 6 decimals, stored as millionths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i64);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("must be a finite number")]
    NotFinite,
    #[error("has more than 6 decimals")]
    TooPrecise,
    #[error("is too large")]
    TooLarge,
}

impl Money {
    pub const ZERO: Money = Money(0);
    /// The largest amount `from_f64` yields (below 9,000,000,000: past 2^33 a double's
    /// step is about 2 millionths, so 8,999,999,999.999999 reads as 8,999,999,999.999998),
    /// and it reads back as itself. (Not every amount past 2^33 does: there a double keeps
    /// 5 decimals exactly, not 6.) It was 8,999,999,999 whole, and a model or match price
    /// saturated there cut an accepted default of 8,999,999,999.99.
    pub const MAX: Money = Money(9_000_000_000 * SCALE - 2);
    pub const MIN: Money = Money(-(9_000_000_000 * SCALE - 2));

    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    pub const fn micros(self) -> i64 {
        self.0
    }

    /// Converts a JSON number, refusing more than 6 decimals.
    pub fn from_f64(v: f64) -> Result<Self, MoneyError> {
        if !v.is_finite() {
            return Err(MoneyError::NotFinite);
        }
        let scaled = v * SCALE as f64;
        if scaled.abs() >= 9.0e15 {
            return Err(MoneyError::TooLarge);
        }
        let rounded = scaled.round();
        // Tolerance of a few ulps of the scaled value: 0.1 * 1e6 is not exactly 100000.
        if (scaled - rounded).abs() > 1e-6_f64.max(scaled.abs() * 4.0 * f64::EPSILON) {
            return Err(MoneyError::TooPrecise);
        }
        Ok(Self(rounded as i64))
    }

    pub fn to_f64(self) -> f64 {
        self.0 as f64 / SCALE as f64
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The amount limited to `[MIN, MAX]`.
    pub fn saturate(self) -> Self {
        self.clamp(Self::MIN, Self::MAX)
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.to_f64())
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_decimals_round_trip_exactly() {
        for s in ["0.1", "19.99", "0.000001", "123456.789012", "0"] {
            let v: f64 = s.parse().unwrap();
            let m = Money::from_f64(v).unwrap();
            let back: f64 = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            assert_eq!(back, v);
            assert_eq!(Money::from_f64(back).unwrap(), m);
        }
        assert_eq!(Money::from_f64(0.1).unwrap().micros(), 100_000);
    }

    #[test]
    fn refuses_seven_decimals_and_non_finite() {
        assert_eq!(Money::from_f64(0.0000001), Err(MoneyError::TooPrecise));
        assert_eq!(Money::from_f64(1.2345678), Err(MoneyError::TooPrecise));
        assert_eq!(Money::from_f64(f64::NAN), Err(MoneyError::NotFinite));
        assert_eq!(Money::from_f64(1e13), Err(MoneyError::TooLarge));
    }

    #[test]
    fn the_limits_round_trip() {
        for m in [
            Money::MAX,
            Money::MIN,
            Money::from_micros(i64::MAX).saturate(),
        ] {
            let back: Money = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            assert_eq!(back, m);
        }
        assert_eq!(Money::from_micros(i64::MIN).saturate(), Money::MIN);
        // The largest accepted amount is the largest: nothing the API reads saturates.
        let largest = Money::from_f64(8_999_999_999.999_999).unwrap();
        assert_eq!(largest, Money::MAX);
        assert_eq!(largest.saturate(), largest);
        assert_eq!(
            Money::from_f64(8_999_999_999.99).unwrap().saturate(),
            Money::from_micros(8_999_999_999_990_000)
        );
    }
}
