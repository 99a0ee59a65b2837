//! Small helpers of the HTTP layer.

use pricing_core::time::Timestamp;
use pricing_core::validate::{Errors, Obj, codes};

pub fn now() -> Timestamp {
    Timestamp::now()
}

/// Management requests are strict: an unknown field is an error, not silently ignored.
/// `reported` are fields that get their own error elsewhere (removed fields).
pub fn reject_unknown_fields(o: &Obj<'_>, known: &[&str], reported: &[&str], errors: &mut Errors) {
    for key in o.map.keys() {
        if !known.contains(&key.as_str()) && !reported.contains(&key.as_str()) {
            errors.push(
                o.ptr_of(key),
                "unknownField",
                format!(
                    "is not a field of this request (known: {})",
                    known.join(", ")
                ),
            );
        }
    }
}

/// Management requests are strict about null too: a field given as null is a 400 `type`
/// (it is not read as absent, as in entries), except the `nullable` ones, where null has a
/// meaning of its own (`timeZone: null` removes the time zone).
pub fn reject_nulls(o: &Obj<'_>, nullable: &[&str], errors: &mut Errors) {
    for (key, value) in o.map {
        if value.is_null() && !nullable.contains(&key.as_str()) {
            errors.push(
                o.ptr_of(key),
                codes::TYPE,
                "must not be null (leave the field out instead)",
            );
        }
    }
}

/// The IANA time zone names the service accepts, one per line, sorted: exactly the zones
/// of the database the scheduler resolves them with (jiff's bundled copy; a test keeps the
/// two equal), spelled as there. A list, not the database: the API functions need the
/// names only, and the database (about 0.3 MB) would count against their size budget.
const TIME_ZONES: &str = include_str!("../time_zones.txt");

/// Whether `name` is a time zone the service accepts, spelled exactly as the database
/// does (`Europe/Berlin`; links such as `US/Eastern` too).
pub fn is_iana_name(name: &str) -> bool {
    static NAMES: std::sync::LazyLock<Vec<&'static str>> =
        std::sync::LazyLock::new(|| TIME_ZONES.lines().collect());
    NAMES.binary_search(&name).is_ok()
}

/// Validates an IANA time zone name.
pub fn check_time_zone(o: &Obj<'_>, key: &str, errors: &mut Errors) -> Option<Option<String>> {
    if !o.map.contains_key(key) {
        return None;
    }
    match o.map.get(key) {
        Some(serde_json::Value::Null) => Some(None),
        Some(serde_json::Value::String(tz)) => {
            if is_iana_name(tz) {
                Some(Some(tz.clone()))
            } else {
                errors.push(
                    o.ptr_of(key),
                    codes::FORMAT,
                    "must be an IANA time zone name such as Europe/Berlin",
                );
                None
            }
        }
        Some(_) => {
            errors.push(o.ptr_of(key), codes::TYPE, "must be a string or null");
            None
        }
        None => None,
    }
}

/// A request that takes no body: none, or `{}` (a client that always sends JSON). A field
/// is a 400 `unknownField` and anything else a 400 `type`, and nothing is done: a
/// malformed secret rotation must not drop a secret.
pub fn no_fields(body: Option<&serde_json::Value>) -> Result<(), crate::error::ApiError> {
    use crate::error::ApiError;
    match body {
        None => Ok(()),
        Some(serde_json::Value::Object(map)) if map.is_empty() => Ok(()),
        Some(serde_json::Value::Object(map)) => {
            let errors = map
                .keys()
                .map(|key| pricing_core::validate::FieldError {
                    pointer: format!("/{}", pricing_core::validate::escape_token(key)),
                    code: "unknownField".into(),
                    message: "is not a field of this request (it takes no body)".into(),
                })
                .collect();
            Err(ApiError::bad_request("this request takes no body").with_errors(errors))
        }
        Some(_) => Err(ApiError::invalid_field(
            "",
            codes::TYPE,
            "this request takes no body (or an empty object)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::is_iana_name;

    #[test]
    fn the_names_are_exactly_the_zones_of_the_database_the_scheduler_uses() {
        let listed: Vec<&str> = super::TIME_ZONES.lines().collect();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(listed, sorted, "time_zones.txt is sorted, without repeats");
        for name in &listed {
            let zone = jiff::tz::TimeZone::get(name).expect("a zone of the database");
            assert_eq!(
                zone.iana_name(),
                Some(*name),
                "spelled as the database does"
            );
        }
        let database: Vec<String> = jiff::tz::db()
            .available()
            .map(|n| n.to_string())
            .filter(|n| {
                jiff::tz::TimeZone::get(n)
                    .ok()
                    .and_then(|z| z.iana_name().map(str::to_owned))
                    .as_deref()
                    == Some(n.as_str())
            })
            .collect();
        let missing: Vec<&String> = database
            .iter()
            .filter(|n| listed.binary_search(&n.as_str()).is_err())
            .collect();
        assert!(
            missing.is_empty(),
            "zones of the database not listed: {missing:?}"
        );
    }

    #[test]
    fn time_zones_are_iana_names_spelled_exactly() {
        for good in [
            "Europe/Berlin",
            "UTC",
            "America/Argentina/Buenos_Aires",
            "US/Eastern",
        ] {
            assert!(is_iana_name(good), "{good}");
        }
        for bad in [
            "europe/berlin",
            "Mars/Olympus",
            "",
            "+01:00",
            "Europe/Berlin ",
            "/",
        ] {
            assert!(!is_iana_name(bad), "{bad:?}");
        }
    }
}
