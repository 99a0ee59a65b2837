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

/// Whether `name` is a time zone of the bundled IANA database, spelled exactly as there
/// (`Europe/Berlin`, links such as `US/Eastern` too; the lookup itself ignores case).
pub fn is_iana_name(name: &str) -> bool {
    jiff::tz::TimeZone::get(name)
        .ok()
        .is_some_and(|zone| zone.iana_name() == Some(name))
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

#[cfg(test)]
mod tests {
    use super::is_iana_name;

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
