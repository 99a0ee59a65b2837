//! Records of the management side: projects, instances, events, log records, messages.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::ids::{
    InstanceId, InstanceKey, ItemId, ProjectId, ProjectKey, SubscriptionId, TenantId, TransactionId,
};
use crate::money::Money;
use crate::pricing::{ItemPrice, Trigger};
use crate::time::Timestamp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub project_id: ProjectId,
    #[serde(skip_serializing)]
    #[serde(default = "unknown_tenant")]
    pub tenant: TenantId,
    pub name: String,
    pub created_at: Timestamp,
}

impl Project {
    pub fn key(&self) -> ProjectKey {
        ProjectKey::new(self.tenant.clone(), self.project_id.clone())
    }
}

fn unknown_tenant() -> TenantId {
    TenantId::from_claim("?").unwrap_or_else(|| unreachable!("non-empty"))
}

/// An instance's configuration (written by the management API, not by entries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// The owner: project ids are scoped by tenant.
    pub tenant: TenantId,
    pub project_id: ProjectId,
    pub instance_id: InstanceId,
    pub name: String,
    /// Scheduled pricing needs this set (INTERFACE.md).
    pub active: bool,
    pub time_zone: Option<String>,
    pub deactivation_date: Option<Timestamp>,
    pub created_at: Timestamp,
    /// Moves on every write; a replace is conditional on it (`InstanceStore::put_instance`).
    pub updated_at: Timestamp,
    /// Whether its `instance.deactivated` event was emitted (set by
    /// [`crate::lifecycle::deactivate`]; a new deactivation date clears it). `None` in a
    /// record written before it was kept: then [`crate::lifecycle::deactivation_announced`]
    /// infers it as it was inferred then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deactivation_announced: Option<bool>,
}

impl Instance {
    pub fn key(&self) -> InstanceKey {
        InstanceKey::new(
            self.tenant.clone(),
            self.project_id.clone(),
            self.instance_id.clone(),
        )
    }

    /// Past its deactivation date an instance is inactive for good.
    pub fn is_deactivated(&self, now: Timestamp) -> bool {
        self.deactivation_date.is_some_and(|d| d <= now)
    }

    /// Active as seen at `now`: the flag, unless the deactivation date has passed.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.active && !self.is_deactivated(now)
    }
}

/// An entry as handed to the log for appending.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    pub transaction_id: Option<TransactionId>,
    pub received_at: Timestamp,
    /// Compact JWS: the client's verbatim, or ours (ES256).
    pub jwt: String,
}

/// What the log did with one new entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    Accepted {
        sequence: u64,
    },
    /// Same (instance, transactionId) seen before: the first one's sequence.
    Duplicate {
        sequence: u64,
    },
}

/// One stored log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogRecord {
    pub sequence: u64,
    pub transaction_id: Option<TransactionId>,
    pub received_at: Timestamp,
    pub jwt: String,
}

/// An event waiting for delivery to subscribers (webhooks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Deterministic where the event derives from the log, so a replay yields the same id.
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub project_id: ProjectId,
    pub instance_id: InstanceId,
    pub created_at: Timestamp,
    pub data: Value,
}

/// Work messages between stages. A message is a wake-up, not the data.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Message {
    /// Apply the unapplied tail of an instance's log (and hand its new events to the
    /// subscriptions).
    #[serde(rename_all = "camelCase")]
    ProcessInstance { key: InstanceKey },
    /// Run the pricing engine for an instance. Idempotent per calculation id.
    #[serde(rename_all = "camelCase")]
    Recalculate {
        key: InstanceKey,
        calculation_id: String,
        trigger: Trigger,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
    },
    /// Attempt (or re-attempt, when due) the delivery of one webhook.
    #[serde(rename_all = "camelCase")]
    Deliver { webhook_id: String },
    /// A subscription's manual trigger: resend the latest prices in its scope, or of one
    /// instance of it (a project-level trigger fans out into one message per instance).
    /// Idempotent per trigger id and instance.
    #[serde(rename_all = "camelCase")]
    Trigger {
        project: ProjectKey,
        subscription_id: SubscriptionId,
        trigger_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance_id: Option<InstanceId>,
        /// Where a project-level fan-out goes on (one page of instances per message).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<String>,
    },
}

/// Which queue a message travels on: instance work is ordered per instance; webhooks are
/// independent of each other and may wait hours between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// ProcessInstance (FIFO per instance on AWS).
    Process,
    /// Recalculate.
    Recalc,
    /// Deliver and Trigger.
    Webhooks,
}

impl Message {
    /// Messages of one group are handled in order, one at a time (FIFO group). At most
    /// 128 characters (SQS's limit for group and deduplication ids).
    pub fn group(&self) -> String {
        bounded_key(match self {
            Message::ProcessInstance { key } | Message::Recalculate { key, .. } => {
                key.storage_key()
            }
            Message::Deliver { webhook_id } => format!("webhook/{webhook_id}"),
            Message::Trigger {
                trigger_id,
                instance_id,
                cursor,
                ..
            } => match (instance_id, cursor) {
                (Some(i), _) => format!("trigger/{trigger_id}/{i}"),
                (None, Some(c)) => format!("trigger/{trigger_id}/after/{c}"),
                (None, None) => format!("trigger/{trigger_id}"),
            },
        })
    }

    /// Pending messages with the same key are merged (content-based deduplication). Keys
    /// of instance work include the tenant: two tenants may both have `summer/day-1`.
    pub fn dedupe_key(&self) -> String {
        bounded_key(match self {
            Message::ProcessInstance { key } => format!("process:{}", key.storage_key()),
            Message::Recalculate {
                key,
                calculation_id,
                ..
            } => format!("recalc:{}:{calculation_id}", key.storage_key()),
            Message::Deliver { webhook_id } => format!("deliver:{webhook_id}"),
            Message::Trigger {
                trigger_id,
                instance_id,
                cursor,
                ..
            } => match (instance_id, cursor) {
                // An instance's continuation (its events after `c`) is another message.
                (Some(i), Some(c)) => format!("trigger:{trigger_id}:{i}:after:{c}"),
                (Some(i), None) => format!("trigger:{trigger_id}:{i}"),
                (None, Some(c)) => format!("trigger:{trigger_id}:after:{c}"),
                (None, None) => format!("trigger:{trigger_id}"),
            },
        })
    }

    pub fn lane(&self) -> Lane {
        match self {
            Message::ProcessInstance { .. } => Lane::Process,
            Message::Recalculate { .. } => Lane::Recalc,
            Message::Deliver { .. } | Message::Trigger { .. } => Lane::Webhooks,
        }
    }
}

/// `key` itself when it fits SQS's 128 characters, else a digest of it (distinct keys stay
/// distinct in practice: 160 bits of SHA-256).
fn bounded_key(key: String) -> String {
    const MAX: usize = 128;
    if key.len() <= MAX {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest[..20].iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// Paging parameters, validated by the API (limit 1..=1000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub cursor: Option<String>,
    pub limit: usize,
}

/// A stored price calculation: the full price list of an instance after one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceCalculation {
    pub calculation_id: String,
    pub trigger: Trigger,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub calculated_at: Timestamp,
    /// Per instance, increasing from 1: receivers drop webhooks older than one they have.
    pub sequence: u64,
    /// Every live item, calculated or kept, in item id order.
    pub prices: Vec<ItemPrice>,
}

impl PriceCalculation {
    /// The current price of every item, for the next calculation's `previous`.
    pub fn price_map(&self) -> std::collections::BTreeMap<ItemId, Money> {
        crate::pricing::prices_by_item(&self.prices)
    }
}

impl PriceCalculation {
    /// The calculation as `PriceStore::latest_prices` returns it: every price without its
    /// explanation (an item's explanation is stored once, in its price history, when its
    /// price changes).
    pub fn without_explanations(&self) -> PriceCalculation {
        PriceCalculation {
            prices: self
                .prices
                .iter()
                .map(|p| ItemPrice {
                    explanation: crate::pricing::Explanation::default(),
                    ..p.clone()
                })
                .collect(),
            ..self.clone()
        }
    }
}

/// Whether a price goes into its item's history: a price that changed, calculated or
/// kept (an item's first price is a change: a schedule or sales run that does not price
/// the item keeps its default, and its history starts there, with the `kept`
/// explanation). A price calculated again at the same value, or kept as it was, costs the
/// history nothing: the item's last entry still explains its price.
pub fn is_history_entry(p: &ItemPrice) -> bool {
    p.changed
}

/// A price as a store keeps the latest calculation: the item, its price, whether it
/// changed (and from what) only when it did, whether it was kept, and what the revenue
/// model carries to the next calculation; no explanation. About 40 bytes of JSON for an
/// unchanged price (an `ItemPrice` with its explanation: 300 to 900).
#[derive(Debug, Serialize)]
pub struct StoredPriceRef<'a> {
    #[serde(rename = "i")]
    item_id: &'a ItemId,
    #[serde(rename = "p")]
    price: Money,
    /// `(changed, previousPrice)`, absent when the price is unchanged (`previousPrice` is
    /// the price and `changed` false).
    #[serde(rename = "d", skip_serializing_if = "Option::is_none")]
    change: Option<(bool, Option<Money>)>,
    #[serde(rename = "k", skip_serializing_if = "std::ops::Not::not")]
    kept: bool,
    #[serde(rename = "e", skip_serializing_if = "Option::is_none")]
    exposure: Option<&'a crate::pricing::demand::Exposure>,
}

impl<'a> StoredPriceRef<'a> {
    pub fn of(p: &'a ItemPrice) -> Self {
        let unchanged = !p.changed && p.previous_price == Some(p.price);
        StoredPriceRef {
            item_id: &p.item_id,
            price: p.price,
            change: (!unchanged).then_some((p.changed, p.previous_price)),
            kept: p.status == crate::pricing::PriceStatus::Kept,
            exposure: p.exposure.as_ref(),
        }
    }
}

/// [`StoredPriceRef`] read back.
#[derive(Debug, Deserialize)]
pub struct StoredPrice {
    #[serde(rename = "i")]
    item_id: ItemId,
    #[serde(rename = "p")]
    price: Money,
    #[serde(rename = "d", default)]
    change: Option<(bool, Option<Money>)>,
    #[serde(rename = "k", default)]
    kept: bool,
    #[serde(rename = "e", default)]
    exposure: Option<crate::pricing::demand::Exposure>,
}

impl StoredPrice {
    /// The price with an empty explanation (see [`PriceCalculation::without_explanations`]).
    pub fn into_item_price(self) -> ItemPrice {
        let (changed, previous_price) = self.change.unwrap_or((false, Some(self.price)));
        ItemPrice {
            item_id: self.item_id,
            price: self.price,
            previous_price,
            changed,
            status: if self.kept {
                crate::pricing::PriceStatus::Kept
            } else {
                crate::pricing::PriceStatus::Calculated
            },
            explanation: crate::pricing::Explanation::default(),
            exposure: self.exposure,
        }
    }
}

/// One calculated price of an item, as its price history lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceHistoryEntry {
    pub sequence: u64,
    pub calculation_id: String,
    pub trigger: Trigger,
    pub calculated_at: Timestamp,
    #[serde(flatten)]
    pub price: ItemPrice,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, project: &str) -> InstanceKey {
        ProjectKey::new(
            TenantId::from_claim(tenant).unwrap(),
            ProjectId::parse(project).unwrap(),
        )
        .instance(InstanceId::parse("day-1").unwrap())
    }

    #[test]
    fn instance_work_of_two_tenants_never_shares_a_group_or_a_dedupe_key() {
        let (a, b) = (key("acme", "summer"), key("globex", "summer"));
        let recalc = |key: &InstanceKey| Message::Recalculate {
            key: key.clone(),
            calculation_id: "sales_day-1_5".into(),
            trigger: Trigger::Sales,
            metadata: None,
        };
        for (x, y) in [
            (
                Message::ProcessInstance { key: a.clone() },
                Message::ProcessInstance { key: b.clone() },
            ),
            (recalc(&a), recalc(&b)),
        ] {
            assert_ne!(x.group(), y.group());
            assert_ne!(x.dedupe_key(), y.dedupe_key());
        }
    }

    #[test]
    fn group_and_dedupe_keys_fit_sqs() {
        let long = key(&"t".repeat(256), &"p".repeat(128));
        let m = Message::ProcessInstance { key: long.clone() };
        assert!(m.group().len() <= 128, "{}", m.group());
        assert!(m.dedupe_key().len() <= 128);
        let other = Message::ProcessInstance {
            key: key(&"t".repeat(255), &"p".repeat(128)),
        };
        assert_ne!(m.group(), other.group(), "digests keep long keys apart");
        let short = Message::ProcessInstance {
            key: key("acme", "summer"),
        };
        assert_eq!(short.group(), "acme/summer/day-1");
    }
}
