//! Fast decoding of the stored item records in JSON (`state_items.record` as written before
//! schema version 9, the JSON of an [`ItemState`]; `item_record.rs` reads them through
//! this, and the version 9 step rewrites them in the binary form). `ItemProps` keeps the
//! client's other properties with `#[serde(flatten)]`, which makes serde buffer every field
//! of the properties into an intermediate tree before decoding it. These records are
//! decoded here field by field instead, into the same values (tested against serde's
//! decoding of the same records).

use std::fmt;

use pricing_core::document::{CompactObject, PlainValue};
use pricing_core::entry::{ItemProps, PriceSettings};
use pricing_core::ids::{ItemId, ProductId};
use pricing_core::pricing::demand::SalesStats;
use pricing_core::state::ItemState;
use pricing_core::time::{Period, Timestamp};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Map;

/// One stored item record.
pub(crate) fn decode_item(record: &str) -> serde_json::Result<ItemState> {
    let s: StoredItem = serde_json::from_str(record)?;
    // A struct literal: a field added to `ItemState` fails to compile here until it is read.
    Ok(ItemState {
        item_id: s.item_id,
        product_id: s.product_id,
        properties: s.properties.0,
        metadata: s.metadata,
        sold: s.sold,
        reserved: s.reserved,
        total: s.total,
        legacy_quantity: s.legacy_quantity,
        revenue_micros: s.revenue_micros,
        last_sale_at: s.last_sale_at,
        demand: s.demand,
        removed: s.removed,
        seq: s.seq,
    })
}

/// `ItemState` as serde derives it, with the properties decoded by [`Props`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredItem {
    item_id: ItemId,
    product_id: ProductId,
    properties: Props,
    metadata: CompactObject,
    sold: u64,
    reserved: u64,
    #[serde(default)]
    total: Option<u64>,
    #[serde(default)]
    legacy_quantity: Option<u64>,
    revenue_micros: i64,
    #[serde(default)]
    last_sale_at: Option<Timestamp>,
    #[serde(default)]
    demand: SalesStats,
    removed: bool,
    seq: u64,
}

/// `ItemProps` decoded without flatten: the known fields typed, every other one into
/// `extra` (what `#[serde(flatten)]` does).
struct Props(ItemProps);

impl<'de> Deserialize<'de> for Props {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PropsVisitor)
    }
}

struct PropsVisitor;

impl<'de> Visitor<'de> for PropsVisitor {
    type Value = Props;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an item's properties")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Props, A::Error> {
        let mut sales_period: Option<Period> = None;
        let mut dynamic_pricing_period: Option<Period> = None;
        let mut dynamic_pricing: Option<bool> = None;
        let mut price_settings: Option<PriceSettings> = None;
        let mut extra = Map::new();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::SalesPeriod => sales_period = Some(map.next_value()?),
                Key::DynamicPricingPeriod => dynamic_pricing_period = map.next_value()?,
                Key::DynamicPricing => dynamic_pricing = Some(map.next_value()?),
                Key::PriceSettings => price_settings = Some(map.next_value()?),
                Key::Other(name) => {
                    extra.insert(name, map.next_value_seed(PlainValue)?);
                }
            }
        }
        Ok(Props(ItemProps {
            sales_period: sales_period.ok_or_else(|| de::Error::missing_field("salesPeriod"))?,
            dynamic_pricing_period,
            dynamic_pricing: dynamic_pricing
                .ok_or_else(|| de::Error::missing_field("dynamicPricing"))?,
            price_settings: price_settings
                .ok_or_else(|| de::Error::missing_field("priceSettings"))?,
            extra: CompactObject::from_map(&extra),
        }))
    }
}

/// A key of the properties: a known field (no allocation) or another one by name.
enum Key {
    SalesPeriod,
    DynamicPricingPeriod,
    DynamicPricing,
    PriceSettings,
    Other(String),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a property name")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "salesPeriod" => Key::SalesPeriod,
                    "dynamicPricingPeriod" => Key::DynamicPricingPeriod,
                    "dynamicPricing" => Key::DynamicPricing,
                    "priceSettings" => Key::PriceSettings,
                    other => Key::Other(other.to_owned()),
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn same(record: Value) {
        let text = record.to_string();
        let serde: ItemState = serde_json::from_str(&text).expect("serde decodes");
        let fast = decode_item(&text).expect("decode_item decodes");
        assert_eq!(fast, serde, "{text}");
        // And the record written from either reads back the same.
        assert_eq!(
            decode_item(&serde_json::to_string(&fast).expect("encode")).expect("decode"),
            serde
        );
    }

    fn record() -> Value {
        json!({
            "itemId": "item-1", "productId": "prod-1",
            "properties": {
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
                "dynamicPricing": true,
                "priceSettings": {"min": 10, "max": 200.5, "default": 40}
            },
            "metadata": {}, "sold": 3, "reserved": 1, "revenueMicros": 120000000,
            "removed": false, "seq": 7
        })
    }

    #[test]
    fn a_plain_record_decodes_as_serde_decodes_it() {
        same(record());
    }

    #[test]
    fn every_optional_field_and_other_properties_decode_as_serde_decodes_them() {
        let mut r = record();
        r["properties"]["dynamicPricingPeriod"] =
            json!({"start": "2026-03-01T00:00:00Z", "end": "2026-04-01T00:00:00Z"});
        r["properties"]["priceSettings"]["multiplier"] = json!(1.25);
        r["properties"]["section"] = json!("A");
        r["properties"]["seat"] = json!({"row": 3, "tags": ["aisle", null, 2.5]});
        r["properties"]["priceSettings2"] = json!(null);
        r["metadata"] = json!({"note": "x", "n": [1, 2]});
        r["total"] = json!(10);
        r["legacyQuantity"] = json!(4);
        r["lastSaleAt"] = json!("2026-02-01T10:00:00Z");
        r["removed"] = json!(true);
        same(r);
    }

    /// A member named as serde_json reserves (a patch could make one before such names were
    /// refused) reads back as it was stored, in the metadata and the other properties.
    #[test]
    fn a_reserved_member_name_reads_back_as_stored() {
        let mut r = record();
        let odd = json!({"$serde_json::private::RawValue": "{}", "k": 1});
        r["properties"]["pn"] = odd.clone();
        r["metadata"] = json!({"n": odd});
        let item = decode_item(&r.to_string()).expect("decodes");
        assert_eq!(item.properties.extra.to_map()["pn"], odd);
        assert_eq!(item.metadata.to_map()["n"], odd);
    }

    #[test]
    fn a_null_dynamic_pricing_period_is_none_as_with_serde() {
        let mut r = record();
        r["properties"]["dynamicPricingPeriod"] = Value::Null;
        same(r);
    }

    #[test]
    fn a_record_without_a_required_property_is_refused_as_serde_refuses_it() {
        for field in ["salesPeriod", "dynamicPricing", "priceSettings"] {
            let mut r = record();
            r["properties"]
                .as_object_mut()
                .expect("object")
                .remove(field);
            let text = r.to_string();
            assert!(serde_json::from_str::<ItemState>(&text).is_err());
            let err = decode_item(&text).expect_err("refused").to_string();
            assert!(err.contains(field), "{err}");
        }
    }
}
