//! [`CompactObject`]: a JSON object kept as its compact text.
//!
//! An item's metadata and its client-defined properties are read by the API and changed by
//! entries, never by the pricing engine, and a large instance holds 100,000 items or more.
//! Held as a `serde_json::Map` (a `BTreeMap`), every non-empty one costs a tree node of
//! about 630 bytes plus an allocation per key and per string value; held as text, one
//! allocation of its compact length, and nothing for an empty one. Loading a large state
//! and keeping it in memory are where that shows (docs/performance.md).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

/// A JSON object held as its compact, canonical text: the text `serde_json` writes for the
/// same [`Map`] (keys in order, no spaces). Equality and hashing compare the text: the
/// same maps give the same text, except that `-0.0` and `0.0` (equal as numbers) differ.
/// An empty object holds nothing.
///
/// It serializes and deserializes as the object itself (also under `#[serde(flatten)]`).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CompactObject(Option<Box<str>>);

impl CompactObject {
    /// The empty object.
    pub const fn new() -> Self {
        Self(None)
    }

    /// The object `map`.
    pub fn from_map(map: &Map<String, Value>) -> Self {
        if map.is_empty() {
            return Self(None);
        }
        // Serializing a map of `Value`s to a `String` cannot fail.
        let text = serde_json::to_string(map).unwrap_or_else(|_| "{}".to_owned());
        Self(Some(text.into_boxed_str()))
    }

    /// An object from its canonical text, as [`CompactObject::as_str`] gives it. The caller
    /// vouches for the form (a store decoding what it wrote from such a text or map); debug
    /// builds check it.
    pub fn from_canonical(text: String) -> Self {
        if text == "{}" {
            return Self(None);
        }
        let object = Self(Some(text.into_boxed_str()));
        debug_assert!(
            serde_json::to_string(&object.to_map()).is_ok_and(|t| t == object.as_str()),
            "not the canonical text of a JSON object: {}",
            object.as_str()
        );
        object
    }

    /// The compact text, `{}` when empty.
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("{}")
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The object as a map (decoded from the text, every member as it is: see [`PlainValue`]).
    pub fn to_map(&self) -> Map<String, Value> {
        let Some(text) = &self.0 else {
            return Map::new();
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let map = PlainMap
            .deserialize(&mut de)
            .and_then(|m| de.end().map(|()| m));
        // The text is JSON that serde_json or the store's decoder wrote from a map (at
        // most the depth documents may have), so it reads back.
        debug_assert!(
            map.is_ok(),
            "the text of a CompactObject does not read: {text}"
        );
        map.unwrap_or_default()
    }
}

/// Reads a JSON value as it is written (a seed for hand-written decoders). serde_json's own
/// `Value` (with the workspace's `raw_value`) reads an object whose first member is named
/// `$serde_json::private::...` as one of its own values; no document can get such a
/// member any more (see [`super::is_reserved_member`]), but one stored before that was
/// refused must still read back as the map it was, not as something else, nothing, or an
/// error that stops its instance from loading.
pub struct PlainValue;

/// [`PlainValue`] for an object.
struct PlainMap;

/// For `#[serde(deserialize_with = "...")]` on a stored document: an object read with
/// [`PlainValue`].
pub fn plain_map<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    PlainMap.deserialize(d)
}

impl<'de> DeserializeSeed<'de> for PlainValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Values { strict: false })
    }
}

impl<'de> DeserializeSeed<'de> for PlainMap {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match d.deserialize_map(Values { strict: false })? {
            Value::Object(map) => Ok(map),
            _ => Err(de::Error::custom("expected a JSON object")),
        }
    }
}

/// The one reader of JSON values as they are written, behind [`PlainValue`] (stored
/// documents: read back as they were) and [`super::parse_unique`] (`strict`: new input,
/// where a member named twice or a reserved member name is refused).
#[derive(Clone, Copy)]
pub(super) struct Values {
    pub(super) strict: bool,
}

impl<'de> DeserializeSeed<'de> for Values {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Values {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own `Value`: a number that is not finite is null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(self)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // serde_json reads an object whose member is named so as one of its own
            // values (a raw value, with the workspace's `raw_value`): stored, it would
            // not decode again.
            if self.strict && super::is_reserved_member(&key) {
                return Err(de::Error::custom(format!(
                    "the member name {} is reserved",
                    super::quoted(&key)
                )));
            }
            let value = map.next_value_seed(self)?;
            match members.entry(key) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Occupied(taken) if self.strict => {
                    let key = super::quoted(taken.key());
                    return Err(de::Error::custom(format!(
                        "{} {key} twice",
                        super::DUPLICATE
                    )));
                }
                // Stored documents name each member once; serde_json keeps the last.
                serde_json::map::Entry::Occupied(mut taken) => {
                    taken.insert(value);
                }
            }
        }
        Ok(Value::Object(members))
    }
}

impl From<Map<String, Value>> for CompactObject {
    fn from(map: Map<String, Value>) -> Self {
        Self::from_map(&map)
    }
}

impl From<&Map<String, Value>> for CompactObject {
    fn from(map: &Map<String, Value>) -> Self {
        Self::from_map(map)
    }
}

impl fmt::Debug for CompactObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CompactObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CompactObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        PlainMap
            .deserialize(deserializer)
            .map(|m| Self::from_map(&m))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn it_is_the_text_serde_json_writes_and_gives_the_same_map_back() {
        let m = map(json!({"z": [1, -2, 2.5, 1e300, null, true], "a": {"é\"\n": "x"}, "m": {}}));
        let o = CompactObject::from_map(&m);
        assert_eq!(o.as_str(), serde_json::to_string(&m).unwrap());
        assert_eq!(o.to_map(), m);
        assert_eq!(serde_json::to_value(&o).unwrap(), Value::Object(m.clone()));
        let back: CompactObject = serde_json::from_str(o.as_str()).unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn equal_maps_make_equal_objects_whatever_their_order_or_spacing() {
        let a: CompactObject = serde_json::from_str(r#"{"b": 1, "a": [2.0, "x"]}"#).unwrap();
        let b: CompactObject = serde_json::from_str(r#"{"a":[2.0,"x"],"b":1}"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(
            a,
            CompactObject::from_map(&map(json!({"a": [2.0, "x"], "b": 2})))
        );
    }

    #[test]
    fn the_empty_object_holds_nothing() {
        assert!(CompactObject::from_map(&Map::new()).is_empty());
        assert_eq!(CompactObject::new().as_str(), "{}");
        assert_eq!(
            CompactObject::from_canonical("{}".into()),
            CompactObject::new()
        );
        assert_eq!(serde_json::to_string(&CompactObject::new()).unwrap(), "{}");
        assert!(!CompactObject::from_map(&map(json!({"a": {}}))).is_empty());
    }

    #[test]
    fn it_flattens_into_the_struct_around_it() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Props {
            known: u32,
            #[serde(flatten)]
            extra: CompactObject,
        }
        let p: Props = serde_json::from_value(json!({"known": 1, "b": [1], "a": "x"})).unwrap();
        assert_eq!(p.extra.as_str(), r#"{"a":"x","b":[1]}"#);
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"known": 1, "a": "x", "b": [1]})
        );
    }

    #[test]
    fn a_member_serde_json_reserves_reads_back_as_the_member_it_is() {
        // Stored before patch paths refused such names: it must come back as it was
        // (serde_json's own Value reads the first as the array [1,2], the second as
        // nothing).
        for m in [
            json!({"n": {"$serde_json::private::RawValue": "[1,2]"}, "keep": 1}),
            json!({"$serde_json::private::RawValue": "9", "x": 1}),
        ] {
            let m = map(m);
            let o = CompactObject::from_map(&m);
            assert_eq!(o.to_map(), m);
            assert_eq!(serde_json::to_value(&o).unwrap(), Value::Object(m.clone()));
            let back: CompactObject = serde_json::from_str(o.as_str()).unwrap();
            assert_eq!(back, o);
        }
    }

    #[test]
    fn a_value_that_is_no_object_is_refused() {
        assert!(serde_json::from_str::<CompactObject>("[1]").is_err());
        assert!(serde_json::from_value::<CompactObject>(json!("x")).is_err());
    }
}
