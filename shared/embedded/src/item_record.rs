//! The stored form of an item record (`state_items.record`): a compact binary encoding of
//! an [`ItemState`] (since schema version 9), or the JSON of one (rows written before,
//! until the version 9 step rewrites them; still read).
//!
//! Loading a large state is decoding its item records; the JSON form cost about 23,000
//! instructions per record with sales statistics (every number and timestamp parsed from
//! text), this one a few thousand (docs/performance.md, "A binary stored form").
//!
//! The form, version 1 (first byte `1`; a JSON record starts with `{`): the fields of
//! `ItemState` in declaration order. Unsigned integers are LEB128 varints, signed ones
//! zigzag varints, `f64` its 8 bytes little-endian, a string its byte length and UTF-8
//! bytes, an `Option` a byte 0 or 1 then the value, a timestamp its Unix seconds (signed)
//! and nanoseconds, an amount its micros (signed), a list its length then its elements,
//! and a JSON object (metadata, the client's other properties) its entry count then each
//! key and value, a value a tag byte ([`Tag`]) then its content. Decoding gives back the
//! same `ItemState` exactly (tested), amounts and timestamps included.

use pricing_core::document::CompactObject;
use pricing_core::entry::{ItemProps, PriceSettings};
use pricing_core::ids::{ItemId, ProductId};
use pricing_core::money::Money;
use pricing_core::pricing::demand::SalesStats;
use pricing_core::state::ItemState;
use pricing_core::time::{Period, Timestamp};
use serde_json::{Map, Value};

/// The first byte of a record in the binary form, version 1.
const FORM_V1: u8 = 1;
/// JSON values nested deeper than this are refused: below serde_json's parser limit (128
/// levels), so the text an object decodes to always reads back (`CompactObject::to_map`);
/// documents themselves are at most 32 levels deep.
const MAX_DEPTH: usize = 100;

/// A record that does not decode; mapped like a JSON record that does not decode.
type DecodeResult<T> = Result<T, serde_json::Error>;

fn invalid(what: &str) -> serde_json::Error {
    <serde_json::Error as serde::de::Error>::custom(format!("item record (binary): {what}"))
}

/// The record of `item` in the binary form.
pub(crate) fn encode(item: &ItemState) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(256));
    w.0.push(FORM_V1);
    // Destructured: a field added to `ItemState` fails to compile here until it is stored.
    let ItemState {
        item_id,
        product_id,
        properties,
        metadata,
        sold,
        reserved,
        total,
        legacy_quantity,
        revenue_micros,
        last_sale_at,
        demand,
        removed,
        seq,
    } = item;
    w.str(item_id.as_str());
    w.str(product_id.as_str());
    w.props(properties);
    w.object(metadata);
    w.uint(*sold);
    w.uint(*reserved);
    w.option(total.as_ref(), |w, v| w.uint(*v));
    w.option(legacy_quantity.as_ref(), |w, v| w.uint(*v));
    w.int(*revenue_micros);
    w.option(last_sale_at.as_ref(), |w, t| w.timestamp(t));
    w.sales(demand);
    w.bool(*removed);
    w.uint(*seq);
    w.0
}

/// A stored item record, in either form.
pub(crate) fn decode(record: &[u8]) -> DecodeResult<ItemState> {
    match record.first() {
        Some(&FORM_V1) => decode_v1(&record[1..]),
        Some(b'{') => {
            let text =
                std::str::from_utf8(record).map_err(|_| invalid("JSON that is not UTF-8"))?;
            crate::item_decode::decode_item(text)
        }
        Some(b) => Err(invalid(&format!("unknown form {b}"))),
        None => Err(invalid("empty")),
    }
}

fn decode_v1(bytes: &[u8]) -> DecodeResult<ItemState> {
    let mut r = Reader { bytes, at: 0 };
    let item = ItemState {
        item_id: ItemId::parse(r.str()?).map_err(|e| invalid(&format!("item id: {e}")))?,
        product_id: ProductId::parse(r.str()?).map_err(|e| invalid(&format!("product id: {e}")))?,
        properties: r.props()?,
        metadata: r.object()?,
        sold: r.uint()?,
        reserved: r.uint()?,
        total: r.option(Reader::uint)?,
        legacy_quantity: r.option(Reader::uint)?,
        revenue_micros: r.int()?,
        last_sale_at: r.option(Reader::timestamp)?,
        demand: r.sales()?,
        removed: r.bool()?,
        seq: r.uint()?,
    };
    if r.at != bytes.len() {
        return Err(invalid("bytes after the record"));
    }
    Ok(item)
}

/// The tag byte of a JSON value.
#[repr(u8)]
enum Tag {
    Null = 0,
    False = 1,
    True = 2,
    /// A non-negative integer (serde_json's `u64` number).
    PosInt = 3,
    /// A negative integer (`i64`).
    NegInt = 4,
    Float = 5,
    String = 6,
    Array = 7,
    Object = 8,
}

struct Writer(Vec<u8>);

impl Writer {
    fn uint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn int(&mut self, v: i64) {
        self.uint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn len(&mut self, n: usize) {
        self.uint(n as u64);
    }

    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bool(&mut self, v: bool) {
        self.0.push(u8::from(v));
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn option<T>(&mut self, v: Option<&T>, put: impl FnOnce(&mut Self, &T)) {
        match v {
            None => self.0.push(0),
            Some(v) => {
                self.0.push(1);
                put(self, v);
            }
        }
    }

    fn timestamp(&mut self, t: &Timestamp) {
        self.int(t.0.timestamp());
        self.uint(u64::from(t.0.timestamp_subsec_nanos()));
    }

    fn period(&mut self, p: &Period) {
        self.timestamp(&p.start);
        self.timestamp(&p.end);
    }

    fn money(&mut self, m: Money) {
        self.int(m.micros());
    }

    fn props(&mut self, p: &ItemProps) {
        let ItemProps {
            sales_period,
            dynamic_pricing_period,
            dynamic_pricing,
            price_settings,
            extra,
        } = p;
        let PriceSettings {
            min,
            max,
            default,
            multiplier,
        } = price_settings;
        self.period(sales_period);
        self.option(dynamic_pricing_period.as_ref(), Self::period);
        self.bool(*dynamic_pricing);
        self.money(*min);
        self.money(*max);
        self.money(*default);
        self.f64(*multiplier);
        self.object(extra);
    }

    fn sales(&mut self, s: &SalesStats) {
        let SalesStats {
            units,
            paid,
            bins,
            relative,
        } = s;
        self.uint(*units);
        self.f64(*paid);
        self.len(bins.len());
        for b in bins {
            self.uint(*b);
        }
        self.len(relative.len());
        for r in relative {
            self.f64(*r);
        }
    }

    fn object(&mut self, o: &CompactObject) {
        self.map(&o.to_map());
    }

    fn map(&mut self, m: &Map<String, Value>) {
        self.len(m.len());
        for (k, v) in m {
            self.str(k);
            self.value(v);
        }
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.0.push(Tag::Null as u8),
            Value::Bool(false) => self.0.push(Tag::False as u8),
            Value::Bool(true) => self.0.push(Tag::True as u8),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.0.push(Tag::PosInt as u8);
                    self.uint(u);
                } else if let Some(i) = n.as_i64() {
                    self.0.push(Tag::NegInt as u8);
                    self.int(i);
                } else {
                    // Without serde_json's arbitrary_precision (not enabled), a number
                    // that is no integer is an f64.
                    self.0.push(Tag::Float as u8);
                    self.f64(n.as_f64().unwrap_or(f64::NAN));
                }
            }
            Value::String(s) => {
                self.0.push(Tag::String as u8);
                self.str(s);
            }
            Value::Array(a) => {
                self.0.push(Tag::Array as u8);
                self.len(a.len());
                for v in a {
                    self.value(v);
                }
            }
            Value::Object(m) => {
                self.0.push(Tag::Object as u8);
                self.map(m);
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> DecodeResult<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| invalid("truncated"))?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| invalid("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn uint(&mut self) -> DecodeResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            // The tenth byte holds bit 63 only: more would not fit in 64 bits.
            if shift == 63 && b > 1 {
                return Err(invalid("a varint past 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(invalid("a varint longer than 10 bytes"))
    }

    fn int(&mut self) -> DecodeResult<i64> {
        let z = self.uint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    /// A length, bounded by the bytes left (every element takes at least one byte).
    fn len(&mut self) -> DecodeResult<usize> {
        let n = usize::try_from(self.uint()?).map_err(|_| invalid("a length too large"))?;
        if n > self.bytes.len() - self.at {
            return Err(invalid("a length past the end"));
        }
        Ok(n)
    }

    fn f64(&mut self) -> DecodeResult<f64> {
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| invalid("truncated"))?;
        Ok(f64::from_le_bytes(b))
    }

    fn bool(&mut self) -> DecodeResult<bool> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(invalid("a boolean that is not 0 or 1")),
        }
    }

    fn str(&mut self) -> DecodeResult<&'a str> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| invalid("a string that is not UTF-8"))
    }

    fn option<T>(
        &mut self,
        get: impl FnOnce(&mut Self) -> DecodeResult<T>,
    ) -> DecodeResult<Option<T>> {
        match self.byte()? {
            0 => Ok(None),
            1 => get(self).map(Some),
            _ => Err(invalid("an option flag that is not 0 or 1")),
        }
    }

    fn timestamp(&mut self) -> DecodeResult<Timestamp> {
        let secs = self.int()?;
        let nanos = u32::try_from(self.uint()?).map_err(|_| invalid("nanoseconds"))?;
        chrono::DateTime::from_timestamp(secs, nanos)
            .map(Timestamp)
            .ok_or_else(|| invalid("a timestamp out of range"))
    }

    fn period(&mut self) -> DecodeResult<Period> {
        Ok(Period {
            start: self.timestamp()?,
            end: self.timestamp()?,
        })
    }

    fn money(&mut self) -> DecodeResult<Money> {
        Ok(Money::from_micros(self.int()?))
    }

    fn props(&mut self) -> DecodeResult<ItemProps> {
        Ok(ItemProps {
            sales_period: self.period()?,
            dynamic_pricing_period: self.option(Self::period)?,
            dynamic_pricing: self.bool()?,
            price_settings: PriceSettings {
                min: self.money()?,
                max: self.money()?,
                default: self.money()?,
                multiplier: self.f64()?,
            },
            extra: self.object()?,
        })
    }

    fn sales(&mut self) -> DecodeResult<SalesStats> {
        let units = self.uint()?;
        let paid = self.f64()?;
        let n = self.len()?;
        let mut bins = Vec::with_capacity(n);
        for _ in 0..n {
            bins.push(self.uint()?);
        }
        let n = self.len()?;
        let mut relative = Vec::with_capacity(n);
        for _ in 0..n {
            relative.push(self.f64()?);
        }
        Ok(SalesStats {
            units,
            paid,
            bins,
            relative,
        })
    }

    /// A JSON object (metadata, the client's other properties), written straight into its
    /// canonical text: no map is built.
    fn object(&mut self) -> DecodeResult<CompactObject> {
        // About the encoded length of a small object; grows for a larger one.
        let mut text = String::with_capacity(64);
        if !self.object_text(0, &mut text)? {
            return Ok(CompactObject::new());
        }
        Ok(CompactObject::from_canonical(text))
    }

    /// Writes the object at the cursor as compact JSON, keys in the order stored (which
    /// [`Writer::map`] wrote from a sorted map, so the text is canonical; a record whose
    /// keys are out of order is refused). Whether it has entries.
    fn object_text(&mut self, depth: usize, out: &mut String) -> DecodeResult<bool> {
        let n = self.len()?;
        out.push('{');
        let mut last: Option<&str> = None;
        for i in 0..n {
            if i > 0 {
                out.push(',');
            }
            let k = self.str()?;
            if last.is_some_and(|last| last >= k) {
                return Err(invalid("object keys out of order"));
            }
            last = Some(k);
            string(out, k);
            out.push(':');
            self.value_text(depth + 1, out)?;
        }
        out.push('}');
        Ok(n > 0)
    }

    fn value_text(&mut self, depth: usize, out: &mut String) -> DecodeResult<()> {
        if depth > MAX_DEPTH {
            return Err(invalid("values nested too deep"));
        }
        let tag = self.byte()?;
        match tag {
            t if t == Tag::Null as u8 => out.push_str("null"),
            t if t == Tag::False as u8 => out.push_str("false"),
            t if t == Tag::True as u8 => out.push_str("true"),
            // Integers as serde_json writes them (it formats them with itoa too).
            t if t == Tag::PosInt as u8 => out.push_str(itoa::Buffer::new().format(self.uint()?)),
            t if t == Tag::NegInt as u8 => out.push_str(itoa::Buffer::new().format(self.int()?)),
            t if t == Tag::Float as u8 => {
                let f = self.f64()?;
                if !f.is_finite() {
                    return Err(invalid("a number not finite"));
                }
                // serde_json's own float formatting, whatever it is.
                out.push_str(&serde_json::to_string(&f)?);
            }
            t if t == Tag::String as u8 => string(out, self.str()?),
            t if t == Tag::Array as u8 => {
                let n = self.len()?;
                out.push('[');
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                    }
                    self.value_text(depth + 1, out)?;
                }
                out.push(']');
            }
            t if t == Tag::Object as u8 => {
                self.object_text(depth, out)?;
            }
            t => return Err(invalid(&format!("unknown value tag {t}"))),
        }
        Ok(())
    }
}

/// A string as serde_json writes it: quoted, `"` `\\` and control characters escaped as
/// its escape table does, everything else (any other UTF-8) as is.
fn string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let needs_escape = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    if !s.bytes().any(needs_escape) {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        if !needs_escape(b) {
            continue;
        }
        // Escaped bytes are ASCII, so `start` and `i` fall on character boundaries.
        out.push_str(&s[start..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Rows rewritten per batch of the version 9 step.
const REWRITE_BATCH: i64 = 1_000;

/// Version 9: item records in the binary form. Every JSON item record is decoded and
/// written again in the binary form, in batches by rowid. A row that does not decode is
/// left as it is, with a warning (loading its state fails as it did before).
pub(crate) fn rewrite_json_records(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let mut after = 0i64;
    let (mut rewritten, mut refused) = (0usize, 0usize);
    loop {
        let rows: Vec<(i64, String)> = tx
            .prepare_cached(
                "SELECT rowid, record FROM state_items
                 WHERE rowid > ?1 AND typeof(record) = 'text' ORDER BY rowid LIMIT ?2",
            )?
            .query_map(rusqlite::params![after, REWRITE_BATCH], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let Some(&(last, _)) = rows.last() else {
            break;
        };
        after = last;
        let mut update =
            tx.prepare_cached("UPDATE state_items SET record = ?2 WHERE rowid = ?1")?;
        for (rowid, json) in rows {
            match crate::item_decode::decode_item(&json) {
                Ok(item) => {
                    update.execute(rusqlite::params![rowid, encode(&item)])?;
                    rewritten += 1;
                }
                Err(error) => {
                    tracing::warn!(rowid, %error, "schema v9: an item record does not decode; left as JSON");
                    refused += 1;
                }
            }
        }
    }
    tracing::info!(
        rewritten,
        refused,
        "schema v9: item records in the binary form"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// An item with every field away from its default: sales statistics with bins, typed
    /// and other properties, nested metadata of every JSON kind, timestamps with
    /// nanoseconds, negative revenue.
    fn rich() -> ItemState {
        let mut item: ItemState = serde_json::from_value(json!({
            "itemId": "seat-A.7~x", "productId": "prod:1",
            "properties": {
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00.123456789Z"},
                "dynamicPricingPeriod": {"start": "1969-12-31T23:59:59.5Z", "end": "2026-04-01T00:00:00Z"},
                "dynamicPricing": false,
                "priceSettings": {"min": 0.000001, "max": 8999999999i64, "default": 19.99, "multiplier": 0.1},
                "section": "Ä – ü 🎟",
                "seat": {"row": 3, "tags": ["aisle", null, 2.5, -7, true, false, [], {}]},
                "big": 18446744073709551615u64,
                "small": -9223372036854775808i64,
                "tiny": 5e-324,
                "nothing": null
            },
            "metadata": {"note": "x", "n": [1, -2, 3.25, 1e300], "deep": {"a": {"b": {"c": [[]]}}}, "": ""},
            "sold": 12, "reserved": 3, "total": 400, "legacyQuantity": 0,
            "revenueMicros": -1234567,
            "lastSaleAt": "2026-02-03T04:05:06.000000007Z",
            "removed": true, "seq": u64::MAX
        }))
        .expect("a valid item");
        for (units, price, tau) in [(2, 40.5, 0.01), (1, 0.1, 0.5), (9, 1e9, 0.999)] {
            item.demand.record(units, price, Some(tau), 42.125);
        }
        item.demand.record(1, 3.0, None, 0.0);
        assert_eq!(
            item.demand.bins.len(),
            pricing_core::pricing::demand::CURVE_BINS
        );
        item
    }

    #[test]
    fn a_rich_item_round_trips_exactly() {
        let item = rich();
        let record = encode(&item);
        assert_eq!(record[0], FORM_V1);
        assert_eq!(decode(&record).expect("decodes"), item);
        // The API sees the same document.
        assert_eq!(
            serde_json::to_value(decode(&record).expect("decodes")).expect("json"),
            serde_json::to_value(&item).expect("json")
        );
        // Smaller than the JSON record.
        let json = serde_json::to_string(&item).expect("json");
        assert!(
            record.len() < json.len() / 2,
            "{} vs {}",
            record.len(),
            json.len()
        );
    }

    #[test]
    fn a_plain_item_round_trips_exactly() {
        let item: ItemState = serde_json::from_value(json!({
            "itemId": "i", "productId": "p",
            "properties": {
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2026-06-01T00:00:00Z"},
                "dynamicPricing": true,
                "priceSettings": {"min": 1, "max": 2, "default": 1.5}
            },
            "metadata": {}, "sold": 0, "reserved": 0, "revenueMicros": 0,
            "removed": false, "seq": 0
        }))
        .expect("a valid item");
        assert_eq!(decode(&encode(&item)).expect("decodes"), item);
    }

    #[test]
    fn a_json_record_written_before_version_9_still_reads() {
        let item = rich();
        let json = serde_json::to_string(&item).expect("json");
        assert_eq!(decode(json.as_bytes()).expect("decodes"), item);
    }

    #[test]
    fn a_damaged_record_is_refused_not_misread() {
        let record = encode(&rich());
        assert!(decode(&[]).is_err());
        assert!(decode(&[9, 0]).is_err(), "an unknown form");
        for cut in 1..record.len() {
            assert!(decode(&record[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "bytes after the record");
        let err = decode(&record[..10]).expect_err("truncated").to_string();
        assert!(err.contains("item record"), "{err}");
    }

    #[test]
    fn a_varint_past_64_bits_is_refused() {
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let mut r = Reader { bytes: &max, at: 0 };
        assert_eq!(r.uint().expect("u64::MAX"), u64::MAX);
        let mut over = max;
        over[9] = 0x02;
        let mut r = Reader {
            bytes: &over,
            at: 0,
        };
        assert!(r.uint().is_err());
    }

    #[test]
    fn values_nested_past_the_limit_are_refused() {
        let mut w = Writer(vec![]);
        w.len(1);
        w.str("k");
        for _ in 0..=MAX_DEPTH {
            w.0.push(Tag::Array as u8);
            w.len(1);
        }
        w.0.push(Tag::Null as u8);
        let mut r = Reader { bytes: &w.0, at: 0 };
        assert!(r.object().is_err());
    }

    #[test]
    fn an_object_decodes_to_the_text_serde_json_writes_and_keys_out_of_order_are_refused() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        let map = match json!({
            "b": [1, -2, 2.5, 1e-7, 1e300, -0.0, u64::MAX, i64::MIN, null, true, false],
            "a": {"y": {}, "x": [], "z": "é\u{2028}😀"},
            every_ascii.clone(): every_ascii,
        }) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let mut w = Writer(vec![]);
        w.map(&map);
        let mut r = Reader { bytes: &w.0, at: 0 };
        let o = r.object().expect("decodes");
        assert_eq!(o.as_str(), serde_json::to_string(&map).expect("text"));
        assert_eq!(o.to_map(), map);

        let mut w = Writer(vec![]);
        w.len(2);
        w.str("b");
        w.0.push(Tag::Null as u8);
        w.str("a");
        w.0.push(Tag::Null as u8);
        let mut r = Reader { bytes: &w.0, at: 0 };
        let err = r.object().expect_err("out of order").to_string();
        assert!(err.contains("out of order"), "{err}");
    }
}
