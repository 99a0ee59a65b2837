//! Builders of instance states for the engine's unit tests.

use serde_json::{Map, Value};

use crate::document::CompactObject;
use crate::entry::{ItemProps, PriceSettings, PricingModel, ProductProps, Rounding};
use crate::ids::{ItemId, ProductId};
use crate::money::Money;
use crate::state::{InstanceState, ItemState, ProductState};
use crate::time::{Period, Timestamp};

pub(crate) fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

pub(crate) fn money(s: &str) -> Money {
    Money::from_f64(s.parse().unwrap()).unwrap()
}

pub(crate) fn id(s: &str) -> ItemId {
    ItemId::parse(s).unwrap()
}

pub(crate) struct Product {
    pub capacity: Option<u64>,
    pub model: PricingModel,
    pub expected_sales: f64,
    pub step: &'static str,
}

impl Default for Product {
    fn default() -> Self {
        Product {
            capacity: Some(100),
            model: PricingModel::Fixed {
                max_step_change: None,
            },
            expected_sales: 1.0,
            step: "0.01",
        }
    }
}

pub(crate) struct Item {
    pub min: &'static str,
    pub max: &'static str,
    pub default: &'static str,
    pub multiplier: f64,
    pub sales: (&'static str, &'static str),
    pub dynamic_pricing_period: Option<(&'static str, &'static str)>,
    pub dynamic_pricing: bool,
    pub sold: u64,
}

impl Default for Item {
    fn default() -> Self {
        Item {
            min: "10",
            max: "100",
            default: "50",
            multiplier: 1.0,
            sales: ("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
            dynamic_pricing_period: None,
            dynamic_pricing: true,
            sold: 0,
        }
    }
}

pub(crate) struct Builder {
    pub state: InstanceState,
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            state: InstanceState::default(),
        }
    }

    pub fn product(&mut self, product_id: &str, p: Product) -> &mut Self {
        let product_id = ProductId::parse(product_id).unwrap();
        self.state.products.insert(
            product_id.clone(),
            ProductState {
                product_id,
                properties: ProductProps {
                    capacity: p.capacity,
                    pricing_model: p.model,
                    expected_sales: p.expected_sales,
                    recalculation: None,
                    rounding: Rounding {
                        step: money(p.step),
                    },
                    extra: Map::new(),
                },
                metadata: Map::new(),
                reserved: 0,
                demand: Default::default(),
                seq: 1,
            },
        );
        self
    }

    pub fn item(&mut self, item_id: &str, product_id: &str, i: Item) -> &mut Self {
        let period = |(a, b): (&str, &str)| Period::new(ts(a), ts(b)).unwrap();
        self.state.items.insert(
            id(item_id),
            ItemState {
                item_id: id(item_id),
                product_id: ProductId::parse(product_id).unwrap(),
                properties: ItemProps {
                    sales_period: period(i.sales),
                    dynamic_pricing_period: i.dynamic_pricing_period.map(period),
                    dynamic_pricing: i.dynamic_pricing,
                    price_settings: PriceSettings {
                        min: money(i.min),
                        max: money(i.max),
                        default: money(i.default),
                        multiplier: i.multiplier,
                    },
                    extra: CompactObject::new(),
                },
                metadata: CompactObject::new(),
                sold: i.sold,
                reserved: 0,
                total: None,
                legacy_quantity: None,
                revenue_micros: 0,
                last_sale_at: None,
                demand: Default::default(),
                removed: false,
                seq: 1,
            },
        );
        self
    }

    pub fn meta(&mut self, meta: Value) -> &mut Self {
        if let Value::Object(m) = meta {
            self.state.header.meta = m;
        }
        self
    }
}
