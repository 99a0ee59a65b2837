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

/// Validates an IANA time zone name.
pub fn check_time_zone(o: &Obj<'_>, key: &str, errors: &mut Errors) -> Option<Option<String>> {
    if !o.map.contains_key(key) {
        return None;
    }
    match o.map.get(key) {
        Some(serde_json::Value::Null) => Some(None),
        Some(serde_json::Value::String(tz)) => {
            if tz.parse::<chrono_tz::Tz>().is_ok() {
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
