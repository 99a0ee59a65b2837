//! Records for the suites, with ids unique to one run so that suites can share a store.

use pricing_core::ids::{
    InstanceId, InstanceKey, ItemId, MatchId, ProductId, ProjectId, ProjectKey, SubscriptionId,
    TenantId, TransactionId,
};
use pricing_core::model::{Event, Instance, Message, NewEntry, PriceCalculation, Project};
use pricing_core::pricing::{ItemPrice, PriceMatch, PriceStatus, Trigger};
use pricing_core::state::{Header, ItemState, ProductState};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{
    Attempt, AttemptUpdate, ClientReport, Delivery, DeliveryStatus, EventType, Subscription,
    SubscriptionSecrets, SubscriptionStatus, WebhookSecret,
};
use serde_json::{Map, Value, json};

/// Ids of one suite run: everything it creates lives under its own project ids.
#[derive(Debug, Clone)]
pub struct Run {
    prefix: String,
}

impl Run {
    /// A fresh run; `what` names the suite in the ids (handy when reading a store).
    pub fn new(what: &str) -> Self {
        Run {
            prefix: format!("{what}-{}", ProjectId::generate()),
        }
    }

    /// A project id of this run: `{prefix}-{name}` (ordered by `name` within the run).
    pub fn project_id(&self, name: &str) -> ProjectId {
        ProjectId::parse(format!("{}-{name}", self.prefix)).expect("a valid project id")
    }

    /// The tenant that owns this run's projects unless a suite names another.
    pub fn owner(&self) -> TenantId {
        self.tenant("owner")
    }

    /// This run's project `name`, owned by [`Run::owner`].
    pub fn project(&self, name: &str) -> ProjectKey {
        ProjectKey::new(self.owner(), self.project_id(name))
    }

    /// An instance key in this run's project `project` of `tenant`.
    pub fn key_of(&self, tenant: &TenantId, project: &str, instance: &str) -> InstanceKey {
        ProjectKey::new(tenant.clone(), self.project_id(project)).instance(instance_id(instance))
    }

    /// An instance key in this run's project `project`, owned by [`Run::owner`].
    pub fn key(&self, project: &str, instance: &str) -> InstanceKey {
        self.project(project).instance(instance_id(instance))
    }

    pub fn tenant(&self, name: &str) -> TenantId {
        TenantId::from_claim(&format!("{}-{name}", self.prefix)).expect("a valid tenant")
    }

    /// A subscription id of this run: `{prefix}-{name}` (ordered by `name` within the run,
    /// as generated ULIDs are by creation time).
    pub fn subscription_id(&self, name: &str) -> SubscriptionId {
        SubscriptionId::parse(format!("{}-{name}", self.prefix)).expect("a valid subscription id")
    }

    /// A webhook id of this run (stores treat webhook ids as opaque).
    pub fn webhook_id(&self, name: &str) -> String {
        format!("wh_{}-{name}", self.prefix)
    }

    /// Whether a message is about one of this run's instances, subscriptions or webhooks.
    pub fn owns(&self, message: &Message) -> bool {
        match message {
            Message::ProcessInstance { key } | Message::Recalculate { key, .. } => {
                key.project_id.as_str().starts_with(&self.prefix)
            }
            Message::Deliver { webhook_id } => webhook_id.contains(&self.prefix),
            Message::Trigger { project, .. } => {
                project.project_id.as_str().starts_with(&self.prefix)
            }
        }
    }
}

pub fn instance_id(s: &str) -> InstanceId {
    InstanceId::parse(s).expect("a valid instance id")
}

pub fn item_id(s: &str) -> ItemId {
    ItemId::parse(s).expect("a valid item id")
}

pub fn product_id(s: &str) -> ProductId {
    ProductId::parse(s).expect("a valid product id")
}

pub fn transaction_id(s: &str) -> TransactionId {
    TransactionId::parse(s).expect("a valid transaction id")
}

pub fn at(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("an RFC 3339 timestamp")
}

pub fn project(id: &ProjectId, tenant: &TenantId, name: &str) -> Project {
    Project {
        project_id: id.clone(),
        tenant: tenant.clone(),
        name: name.to_owned(),
        created_at: at("2026-01-02T03:04:05.678Z"),
    }
}

pub fn instance(key: &InstanceKey, name: &str) -> Instance {
    Instance {
        tenant: key.tenant.clone(),
        project_id: key.project_id.clone(),
        instance_id: key.instance_id.clone(),
        name: name.to_owned(),
        active: true,
        time_zone: Some("Europe/Vienna".into()),
        deactivation_date: None,
        created_at: at("2026-01-02T03:04:05Z"),
        updated_at: at("2026-01-02T03:04:05Z"),
        // A record of before the flag was kept: the contracts say how it is read.
        deactivation_announced: None,
    }
}

pub fn header(applied_seq: u64, meta: Value) -> Header {
    Header {
        meta: as_map(meta),
        applied_seq,
        ..Header::default()
    }
}

/// A log entry; the JWS is opaque to stores, so any compact-looking string does.
pub fn new_entry(transaction: Option<&str>, n: usize) -> NewEntry {
    NewEntry {
        transaction_id: transaction.map(transaction_id),
        received_at: at("2026-03-04T05:06:07.089Z"),
        jwt: format!("eyJhbGciOiJFUzI1NiJ9.eyJuIjo{n}fQ.c2ln{n}"),
    }
}

pub fn item(id: &str, product: &str, sold: u64, seq: u64) -> ItemState {
    serde_json::from_value(json!({
        "itemId": id,
        "productId": product,
        "properties": {
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2026-06-01T00:00:00Z"},
            "dynamicPricing": true,
            "priceSettings": {"min": 10.5, "max": 99.25, "default": 42.125, "multiplier": 1.5},
            "section": "A",
        },
        "metadata": {"row": 7, "seat": id},
        "sold": sold,
        "reserved": 2,
        "total": 100,
        "revenueMicros": sold * 42_125_000,
        "lastSaleAt": "2026-02-03T04:05:06Z",
        "removed": false,
        "seq": seq,
    }))
    .expect("a valid item state")
}

pub fn product(id: &str, seq: u64) -> ProductState {
    serde_json::from_value(json!({
        "productId": id,
        "properties": {
            "capacity": 500,
            "pricingModel": {"type": "pace", "sensitivity": 0.7},
            "expectedSales": 0.9,
            "rounding": {"step": 0.5},
            "recalculation": {"soldPercentStep": 5.0},
        },
        "metadata": {"zone": "north"},
        "reserved": 3,
        "seq": seq,
    }))
    .expect("a valid product state")
}

pub fn event(key: &InstanceKey, id: &str, data: Value) -> Event {
    Event {
        id: id.to_owned(),
        event_type: "entries.rejected".into(),
        project_id: key.project_id.clone(),
        instance_id: key.instance_id.clone(),
        created_at: at("2026-03-04T05:06:07Z"),
        data,
    }
}

/// The price of one item after a calculation: `calculated` with a full explanation (pace
/// model, multipliers, rounding), or `kept` with the reason. `changed` follows `previous`.
pub fn item_price(id: &str, price: f64, previous: Option<f64>, status: PriceStatus) -> ItemPrice {
    let explanation = match status {
        PriceStatus::Calculated => json!({
            "model": {
                "type": "pace",
                "sensitivity": 0.5,
                "curve": 1.5,
                "expectedSales": 0.75,
                "tau": 0.25,
                "expected": 0.09375,
                "sold": 12,
                "capacity": 100,
                "actual": 0.12,
            },
            "productMultiplier": 1.25,
            "itemMultiplier": 1.5,
            "defaultPrice": 40.0,
            "raw": price,
            "rounding": {"step": 0.5, "from": price, "to": price},
        }),
        PriceStatus::Kept => json!({
            "kept": {"reason": "dynamicPricingOff", "source": "previousPrice"},
        }),
    };
    serde_json::from_value(json!({
        "itemId": id,
        "price": price,
        "previousPrice": previous,
        "changed": previous != Some(price),
        "status": status,
        "explanation": explanation,
    }))
    .expect("a valid item price")
}

/// A calculated price (see [`item_price`]).
pub fn calculated(id: &str, price: f64, previous: Option<f64>) -> ItemPrice {
    item_price(id, price, previous, PriceStatus::Calculated)
}

/// A kept price (see [`item_price`]).
pub fn kept(id: &str, price: f64) -> ItemPrice {
    item_price(id, price, Some(price), PriceStatus::Kept)
}

/// A calculation with sequence `sequence`, calculated one minute per sequence after a
/// fixed time; `prices` are sorted by item id, as the engine returns them.
pub fn calculation(
    id: &str,
    sequence: u64,
    trigger: Trigger,
    mut prices: Vec<ItemPrice>,
) -> PriceCalculation {
    prices.sort_by(|a, b| a.item_id.cmp(&b.item_id));
    let minutes = i64::try_from(sequence).expect("a small sequence");
    PriceCalculation {
        calculation_id: id.to_owned(),
        trigger,
        metadata: None,
        calculated_at: Timestamp::from_millis(1_780_000_000_000 + minutes * 60_000)
            .expect("a valid time"),
        sequence,
        prices,
    }
}

pub fn match_id(s: &str) -> MatchId {
    MatchId::parse(s).expect("a valid match id")
}

/// A price match rule: `item` follows `source` (`price = source * ratio + offset`).
pub fn price_match(id: &str, item: &str, source: &str, ratio: f64, offset: f64) -> PriceMatch {
    serde_json::from_value(json!({
        "matchId": id,
        "itemId": item,
        "sourceItemId": source,
        "ratio": ratio,
        "offset": offset,
    }))
    .expect("a valid price match")
}

/// An active subscription taking every event type, at project level (`instance` none) or
/// instance level, created at `created_at`, with a signing secret of its own.
pub fn subscription(
    id: SubscriptionId,
    project: &ProjectKey,
    instance: Option<&str>,
    created_at: Timestamp,
) -> Subscription {
    Subscription {
        subscription_id: id,
        tenant: project.tenant.clone(),
        project_id: project.project_id.clone(),
        instance_id: instance.map(instance_id),
        callback_url: "https://hooks.example.com/pricing?x=1".into(),
        events: EventType::ALL.to_vec(),
        description: "contract suite: ünïcödé, \"quotes\" and more".into(),
        status: SubscriptionStatus::Active,
        created_at,
        disabled_at: None,
        disabled_reason: None,
        secrets: Some(SubscriptionSecrets::new(WebhookSecret::generate())),
    }
}

/// A pending delivery of a new `prices.updated` event `event_id` of `key` to
/// `subscription`, created (and due) at `created_at`.
pub fn delivery(
    key: &InstanceKey,
    subscription: &Subscription,
    event_id: &str,
    created_at: Timestamp,
) -> Delivery {
    let event = Event {
        id: event_id.to_owned(),
        event_type: "prices.updated".into(),
        project_id: key.project_id.clone(),
        instance_id: key.instance_id.clone(),
        created_at,
        data: json!({
            "calculationId": format!("calc-{event_id}"),
            "trigger": "schedule",
            "sequence": 3,
            "part": 1,
            "parts": 1,
            "prices": [{"itemId": "a", "price": 12.5, "previousPrice": 11.0, "changed": true}],
        }),
    };
    Delivery::new(&event, subscription, created_at)
}

/// Attempt number `attempt` at `at`: a success, or a failure retried at `next` (final
/// when `next` is none).
pub fn attempt(attempt: u32, at: Timestamp, next: Option<Timestamp>, ok: bool) -> AttemptUpdate {
    let (status, response_status, error) = if ok {
        (DeliveryStatus::Succeeded, Some(204), None)
    } else {
        let status = if next.is_some() {
            DeliveryStatus::Retrying
        } else {
            DeliveryStatus::Failed
        };
        (
            status,
            Some(503),
            Some("the receiver answered 503".to_owned()),
        )
    };
    AttemptUpdate {
        attempt,
        status,
        response_status,
        error: error.clone(),
        attempted_at: at,
        next_attempt_at: next,
        record: Attempt {
            attempt,
            attempted_at: at,
            response_status,
            error,
            duration_ms: 17,
        },
    }
}

/// A receiver's error report.
pub fn client_report(message: &str, at: Timestamp) -> ClientReport {
    ClientReport {
        message: message.to_owned(),
        status: Some(422),
        reported_at: at,
    }
}

/// `at` plus `secs` seconds.
pub fn plus(at: Timestamp, secs: i64) -> Timestamp {
    Timestamp::from_millis(at.millis() + secs * 1000).expect("a valid time")
}

pub fn process(key: &InstanceKey) -> Message {
    Message::ProcessInstance { key: key.clone() }
}

fn as_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
