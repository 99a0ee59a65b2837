//! Rules of the instance metadata document (`meta`): dates with `main` tags, location.

use serde_json::{Map, Value};

use crate::time::Timestamp;
use crate::validate::{Errors, codes, object};

/// The only tag a date may carry.
pub const MAIN_TAG: &str = "main";

/// Checks a whole instance `meta` document.
pub fn check_instance_meta(v: &Value, ptr: &str, errors: &mut Errors) {
    let Some(o) = object(v, ptr, errors) else {
        return;
    };
    if let Some(dates) = o.get("dates") {
        check_dates(dates, &o.ptr_of("dates"), errors);
    }
    if let Some(location) = o.get("location") {
        check_location(location, &o.ptr_of("location"), errors);
    }
}

/// Writes every date's `start` and `end` of a checked `meta` document in UTC (RFC 3339,
/// as every other time on the wire): `2027-07-01T18:00:00+02:00` is kept as
/// `2027-07-01T16:00:00Z`. Values that are not timestamps are left as they are.
pub fn normalise_dates(meta: &mut Map<String, Value>) {
    let Some(Value::Array(dates)) = meta.get_mut("dates") else {
        return;
    };
    for date in dates.iter_mut().filter_map(|d| d.get_mut("date")) {
        for key in ["start", "end"] {
            if let Some(v) = date.get_mut(key)
                && let Some(t) = v.as_str().and_then(Timestamp::parse)
            {
                *v = Value::String(t.to_rfc3339());
            }
        }
    }
}

pub fn check_dates(v: &Value, ptr: &str, errors: &mut Errors) {
    let Some(list) = v.as_array() else {
        errors.push(ptr, codes::TYPE, "must be an array");
        return;
    };
    for (i, d) in list.iter().enumerate() {
        check_date_entry(d, &format!("{ptr}/{i}"), errors);
    }
}

/// `{date: {start, end}, description?, tags?}`; `actions` (deprecated) is kept as given.
pub fn check_date_entry(v: &Value, ptr: &str, errors: &mut Errors) {
    let Some(o) = object(v, ptr, errors) else {
        return;
    };
    match o.opt_obj("date", errors) {
        Some(d) => {
            // A single point in time is allowed: start equal to end.
            let start = d.req_timestamp("start", errors);
            let end = d.req_timestamp("end", errors);
            if let (Some(s), Some(e)) = (start, end)
                && e < s
            {
                errors.push(d.ptr_of("end"), codes::RANGE, "must not be before start");
            }
        }
        None => {
            if !o.has("date") {
                errors.push(o.ptr_of("date"), codes::REQUIRED, "is required");
            }
        }
    }
    o.opt_str("description", errors);
    if let Some(tags) = o.get("tags") {
        check_tags(tags, &o.ptr_of("tags"), errors);
    }
}

pub fn check_tags(v: &Value, ptr: &str, errors: &mut Errors) {
    let Some(list) = v.as_array() else {
        errors.push(ptr, codes::TYPE, "must be an array");
        return;
    };
    for (i, t) in list.iter().enumerate() {
        check_tag(t, &format!("{ptr}/{i}"), errors);
    }
}

pub fn check_tag(v: &Value, ptr: &str, errors: &mut Errors) {
    if v.as_str() != Some(MAIN_TAG) {
        errors.push(ptr, "unknownTag", "the only allowed tag is `main`");
    }
}

/// `{coord?: {lat, lon}, ...}`.
pub fn check_location(v: &Value, ptr: &str, errors: &mut Errors) {
    let Some(o) = object(v, ptr, errors) else {
        return;
    };
    if let Some(c) = o.opt_obj("coord", errors) {
        let lat = c.opt_f64("lat", errors);
        let lon = c.opt_f64("lon", errors);
        if lat.is_none() && !c.has("lat") {
            errors.push(c.ptr_of("lat"), codes::REQUIRED, "is required");
        }
        if lon.is_none() && !c.has("lon") {
            errors.push(c.ptr_of("lon"), codes::REQUIRED, "is required");
        }
        if lat.is_some_and(|l| !(-90.0..=90.0).contains(&l)) {
            errors.push(c.ptr_of("lat"), codes::RANGE, "must be from -90 to 90");
        }
        if lon.is_some_and(|l| !(-180.0..=180.0).contains(&l)) {
            errors.push(c.ptr_of("lon"), codes::RANGE, "must be from -180 to 180");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errs(v: Value) -> Vec<(String, String)> {
        let mut e = Errors::default();
        check_instance_meta(&v, "", &mut e);
        e.list.into_iter().map(|e| (e.pointer, e.code)).collect()
    }

    #[test]
    fn main_is_the_only_tag_and_duplicates_are_fine() {
        let ok = json!({"dates": [{"date": {"start": "2026-06-01T18:00:00Z", "end": "2026-06-01T23:00:00Z"},
                                   "description": "Show", "tags": ["main", "main"]}]});
        assert!(errs(ok).is_empty());
        let bad = json!({"dates": [{"date": {"start": "2026-06-01T18:00:00Z", "end": "2026-06-01T23:00:00Z"},
                                    "tags": ["main", "premiere"]}]});
        assert_eq!(
            errs(bad),
            vec![("/dates/0/tags/1".into(), "unknownTag".into())]
        );
    }

    #[test]
    fn dates_are_kept_in_utc() {
        let mut meta = json!({"dates": [
            {"date": {"start": "2027-07-01T18:00:00+02:00", "end": "2027-07-01T23:30:00.5-01:00"}},
            {"date": {"start": "2027-07-02T10:00:00Z", "end": 5}}
        ], "location": {"name": "x"}});
        normalise_dates(meta.as_object_mut().unwrap());
        assert_eq!(
            meta,
            json!({"dates": [
                {"date": {"start": "2027-07-01T16:00:00Z", "end": "2027-07-02T00:30:00.500Z"}},
                {"date": {"start": "2027-07-02T10:00:00Z", "end": 5}}
            ], "location": {"name": "x"}})
        );
    }

    #[test]
    fn location_coordinates_are_in_range() {
        assert!(errs(json!({"location": {"coord": {"lat": 52.5, "lon": 13.4}}})).is_empty());
        assert_eq!(
            errs(json!({"location": {"coord": {"lat": 95, "lon": 13.4}}})),
            vec![("/location/coord/lat".into(), "range".into())]
        );
    }
}
