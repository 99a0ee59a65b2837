//! A small reader over `serde_json::Value` that collects every problem with a JSON Pointer,
//! so a client sees all its mistakes at once (DESIGN.md section 3).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::{ParseId, check_id};
use crate::money::Money;
use crate::time::{Period, Timestamp};

/// One problem in a request body or entry, located by a JSON Pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    pub pointer: String,
    pub code: String,
    pub message: String,
}

/// Codes used in [`FieldError::code`]; stable, documented in docs/api.md.
pub mod codes {
    pub const REQUIRED: &str = "required";
    pub const TYPE: &str = "type";
    pub const FORMAT: &str = "format";
    pub const RANGE: &str = "range";
    pub const REMOVED: &str = "removed";
    pub const UNKNOWN_TYPE: &str = "unknownType";
    pub const UNKNOWN_FIELD: &str = "unknownField";
    pub const CONFLICT: &str = "conflict";
    pub const TOO_LARGE: &str = "tooLarge";
    pub const TOO_DEEP: &str = "tooDeep";
    pub const FUTURE: &str = "futureTimestamp";
    /// The body is not JSON.
    pub const JSON: &str = "json";
    /// An object of the body names a member twice.
    pub const DUPLICATE_MEMBER: &str = "duplicateMember";
}

/// Escapes one reference token of a JSON Pointer (RFC 6901).
pub fn escape_token(key: &str) -> std::borrow::Cow<'_, str> {
    if key.contains(['~', '/']) {
        key.replace('~', "~0").replace('/', "~1").into()
    } else {
        key.into()
    }
}

/// Collected problems.
#[derive(Debug, Default)]
pub struct Errors {
    pub list: Vec<FieldError>,
}

impl Errors {
    pub fn push(&mut self, pointer: impl Into<String>, code: &str, message: impl Into<String>) {
        self.list.push(FieldError {
            pointer: pointer.into(),
            code: code.to_owned(),
            message: message.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }
}

/// A JSON object being read, with the pointer where it sits.
pub struct Obj<'a> {
    pub map: &'a Map<String, Value>,
    pub ptr: String,
}

/// Records a member of `map` that is one of `known` spelt another way (`transactionID`,
/// `request_id`): where members are otherwise lenient, such a member would be ignored
/// silently, and with it what it says (a misspelt transaction id would let a retry count
/// twice). Members that resemble nothing known stay lenient.
pub fn misspelt_members(map: &Map<String, Value>, known: &[&str], ptr: &str, errors: &mut Errors) {
    for key in map.keys() {
        misspelt_member(key, known, &format!("{ptr}/{}", escape_token(key)), errors);
    }
}

/// [`misspelt_members`] for one member name `key` (at `ptr`): a patch that adds
/// `/priceSettings/Default` names it alone.
pub fn misspelt_member(key: &str, known: &[&str], ptr: &str, errors: &mut Errors) {
    let plain = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    if known.contains(&key) {
        return;
    }
    if let Some(meant) = known.iter().find(|k| plain(k) == plain(key)) {
        errors.push(
            ptr,
            codes::UNKNOWN_FIELD,
            format!("is not a field: did you mean `{meant}`?"),
        );
    }
}

/// Reads `v` as an object, or records a type error at `ptr`.
pub fn object<'a>(v: &'a Value, ptr: &str, errors: &mut Errors) -> Option<Obj<'a>> {
    match v {
        Value::Object(map) => Some(Obj {
            map,
            ptr: ptr.to_owned(),
        }),
        _ => {
            errors.push(ptr, codes::TYPE, "must be an object");
            None
        }
    }
}

/// The value of a number written with a decimal point or an exponent that is a whole
/// number (`2.0`, `1e2`): JSON Schema counts it as an integer, and so do the integer fields
/// here. Only up to 2^53, where every integer is exact as a float; beyond it such a number
/// may already have been rounded, and is refused as out of range.
fn whole_number(v: &Value) -> Option<f64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    let f = v.as_f64().filter(|_| v.is_f64())?;
    (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f)
}

/// The largest count an entry may give (units sold or returned, reserved, in circulation,
/// a capacity): 2^53 - 1, the largest integer every JSON client reads exactly. The counts
/// of an item or product are sums of them, and stay far within 64 bits: a count past
/// this was stored before, and showed as `oversold` 2^64 - 1.
pub const MAX_COUNT: u64 = (1 << 53) - 1;

/// Whether `v` is a whole number past [`MAX_COUNT`] (in size when `signed`), also one
/// written as a decimal (`1e20`).
pub(crate) fn past_max_count(v: &Value, signed: bool) -> bool {
    v.as_f64()
        .map(|f| if signed { f.abs() } else { f })
        .is_some_and(|f| f.fract() == 0.0 && f > MAX_COUNT as f64)
}

/// The error of a count past [`MAX_COUNT`] at `ptr` (in size when `signed`: a return).
pub(crate) fn too_many(ptr: String, signed: bool, errors: &mut Errors) {
    let bound = if signed {
        format!("from -{MAX_COUNT} to {MAX_COUNT}")
    } else {
        format!("at most {MAX_COUNT}")
    };
    errors.push(
        ptr,
        codes::RANGE,
        format!("must be {bound} (2^53 - 1, the largest count taken)"),
    );
}

/// `v` as a non-negative integer: a JSON integer, or a decimal that is exactly one
/// (`3.0`).
pub fn non_negative_integer(v: &Value) -> Option<u64> {
    let whole = whole_number(v).filter(|f| *f >= 0.0).map(|f| f as u64);
    v.as_u64().or(whole)
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Obj<'a> {
    pub fn ptr_of(&self, key: &str) -> String {
        format!("{}/{}", self.ptr, escape_token(key))
    }

    /// The value of `key`; JSON null counts as absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn missing(&self, key: &str, errors: &mut Errors) {
        errors.push(self.ptr_of(key), codes::REQUIRED, "is required");
    }

    fn wrong(&self, key: &str, expected: &str, got: &Value, errors: &mut Errors) {
        errors.push(
            self.ptr_of(key),
            codes::TYPE,
            format!("must be {expected}, got {}", type_name(got)),
        );
    }

    pub fn opt_str(&self, key: &str, errors: &mut Errors) -> Option<&'a str> {
        match self.get(key)? {
            Value::String(s) => Some(s),
            other => {
                self.wrong(key, "a string", other, errors);
                None
            }
        }
    }

    pub fn req_str(&self, key: &str, errors: &mut Errors) -> Option<&'a str> {
        if !self.has(key) {
            self.missing(key, errors);
            return None;
        }
        self.opt_str(key, errors)
    }

    pub fn opt_id<T: ParseId>(&self, key: &str, errors: &mut Errors) -> Option<T> {
        let s = self.opt_str(key, errors)?;
        match T::parse_id(s) {
            Ok(id) => Some(id),
            Err(e) => {
                errors.push(self.ptr_of(key), codes::FORMAT, e.to_string());
                None
            }
        }
    }

    pub fn req_id<T: ParseId>(&self, key: &str, errors: &mut Errors) -> Option<T> {
        if !self.has(key) {
            self.missing(key, errors);
            return None;
        }
        self.opt_id(key, errors)
    }

    pub fn opt_bool(&self, key: &str, errors: &mut Errors) -> Option<bool> {
        match self.get(key)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong(key, "a boolean", other, errors);
                None
            }
        }
    }

    pub fn opt_f64(&self, key: &str, errors: &mut Errors) -> Option<f64> {
        match self.get(key)? {
            Value::Number(n) => n.as_f64(),
            other => {
                self.wrong(key, "a number", other, errors);
                None
            }
        }
    }

    /// Refuses `key` when it names a new id that is `.` or `..` (see
    /// [`crate::ids::check_new_path_id`]).
    pub fn refuse_dot_segment(&self, key: &str, errors: &mut Errors) {
        if let Some(Value::String(id)) = self.map.get(key)
            && let Err(e) = crate::ids::check_new_path_id(id)
        {
            errors.push(self.ptr_of(key), codes::FORMAT, e.to_string());
        }
    }

    /// A non-negative integer, at most [`MAX_COUNT`] (every such field is a count).
    pub fn opt_u64(&self, key: &str, errors: &mut Errors) -> Option<u64> {
        let v = self.get(key)?;
        if past_max_count(v, false) {
            too_many(self.ptr_of(key), false, errors);
            return None;
        }
        match non_negative_integer(v) {
            Some(n) => Some(n),
            None if v.is_number() => {
                errors.push(
                    self.ptr_of(key),
                    codes::RANGE,
                    "must be a non-negative integer",
                );
                None
            }
            None => {
                self.wrong(key, "a non-negative integer", v, errors);
                None
            }
        }
    }

    pub fn req_u64(&self, key: &str, errors: &mut Errors) -> Option<u64> {
        if !self.has(key) {
            self.missing(key, errors);
            return None;
        }
        self.opt_u64(key, errors)
    }

    /// An integer from -[`MAX_COUNT`] to [`MAX_COUNT`] (every such field is a count).
    pub fn opt_i64(&self, key: &str, errors: &mut Errors) -> Option<i64> {
        let v = self.get(key)?;
        if past_max_count(v, true) {
            too_many(self.ptr_of(key), true, errors);
            return None;
        }
        match v.as_i64().or(whole_number(v).map(|f| f as i64)) {
            Some(n) => Some(n),
            None => {
                self.wrong(key, "an integer", v, errors);
                None
            }
        }
    }

    /// An amount of money; `non_negative` enforces the price-settings rule.
    pub fn opt_money(&self, key: &str, non_negative: bool, errors: &mut Errors) -> Option<Money> {
        let f = self.opt_f64(key, errors)?;
        match Money::from_f64(f) {
            Ok(m) if non_negative && m.is_negative() => {
                errors.push(self.ptr_of(key), codes::RANGE, "must not be negative");
                None
            }
            Ok(m) => Some(m),
            Err(e) => {
                errors.push(self.ptr_of(key), codes::FORMAT, e.to_string());
                None
            }
        }
    }

    pub fn req_money(&self, key: &str, non_negative: bool, errors: &mut Errors) -> Option<Money> {
        if !self.has(key) {
            self.missing(key, errors);
            return None;
        }
        self.opt_money(key, non_negative, errors)
    }

    pub fn opt_timestamp(&self, key: &str, errors: &mut Errors) -> Option<Timestamp> {
        let s = self.opt_str(key, errors)?;
        let t = Timestamp::parse(s);
        if t.is_none() {
            errors.push(
                self.ptr_of(key),
                codes::FORMAT,
                "must be an RFC 3339 timestamp, e.g. 2026-05-19T18:00:00Z",
            );
        }
        t
    }

    pub fn opt_obj(&self, key: &str, errors: &mut Errors) -> Option<Obj<'a>> {
        let v = self.get(key)?;
        object(v, &self.ptr_of(key), errors)
    }

    pub fn opt_map(&self, key: &str, errors: &mut Errors) -> Option<Map<String, Value>> {
        self.opt_obj(key, errors).map(|o| o.map.clone())
    }

    pub fn opt_array(&self, key: &str, errors: &mut Errors) -> Option<&'a Vec<Value>> {
        match self.get(key)? {
            Value::Array(a) => Some(a),
            other => {
                self.wrong(key, "an array", other, errors);
                None
            }
        }
    }

    pub fn opt_period(&self, key: &str, errors: &mut Errors) -> Option<Period> {
        let o = self.opt_obj(key, errors)?;
        o.period(errors)
    }

    /// Reads this object as `{start, end}` with start before end.
    pub fn period(&self, errors: &mut Errors) -> Option<Period> {
        let start = self.req_timestamp("start", errors);
        let end = self.req_timestamp("end", errors);
        let (start, end) = (start?, end?);
        let p = Period::new(start, end);
        if p.is_none() {
            errors.push(self.ptr_of("end"), codes::RANGE, "must be after start");
        }
        p
    }

    pub fn req_timestamp(&self, key: &str, errors: &mut Errors) -> Option<Timestamp> {
        if !self.has(key) {
            self.missing(key, errors);
            return None;
        }
        self.opt_timestamp(key, errors)
    }

    /// Records that a field no longer exists, naming what replaces it.
    pub fn removed(&self, key: &str, replacement: &str, errors: &mut Errors) {
        if self.map.contains_key(key) {
            errors.push(self.ptr_of(key), codes::REMOVED, replacement);
        }
    }
}

/// Checks an id string outside of an object.
pub fn id_error(s: &str) -> Option<String> {
    check_id(s).err().map(|e| e.to_string())
}
