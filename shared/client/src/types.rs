//! The request and response bodies of the API (shared/api/openapi.json). Ids are strings
//! (the service validates them and answers a 400 problem); times are
//! [`Timestamp`]s; event types, subscription and key statuses are the service's own enums.
//! Free-form objects (properties, metadata, explanations, entry `data`) stay JSON values.

use pricing_core::jws::KeyStatus;
use pricing_core::time::Timestamp;
pub use pricing_core::webhooks::{EventType, SubscriptionStatus, WebhookSecret};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One page of a listing: `next` is the cursor of the following page, `None` on the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// `cursor` and `limit` (1..=1000) of a paged listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageQuery {
    pub cursor: Option<String>,
    pub limit: Option<u32>,
}

impl PageQuery {
    pub fn limit(limit: u32) -> Self {
        PageQuery {
            cursor: None,
            limit: Some(limit),
        }
    }

    pub fn cursor(cursor: impl Into<String>) -> Self {
        PageQuery {
            cursor: Some(cursor.into()),
            limit: None,
        }
    }

    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(c) = &self.cursor {
            out.push(("cursor", c.clone()));
        }
        if let Some(l) = self.limit {
            out.push(("limit", l.to_string()));
        }
        out
    }
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub status: String,
    pub api_version: String,
}

/// `POST /oauth2/token` (client credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: u64,
}

/// The token endpoint's error body (RFC 6749 section 5.2), not a problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthError {
    pub error: String,
    #[serde(default)]
    pub error_description: String,
}

/// `GET /webhooks/signatureVerificationKeys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwkSet {
    pub keys: Vec<Jwk>,
}

/// One published P-256 key (`kty` EC, `crv` P-256, `alg` ES256).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    pub kid: String,
    pub kty: String,
    pub crv: String,
    pub x: String,
    pub y: String,
    #[serde(default)]
    pub alg: Option<String>,
    pub status: KeyStatus,
    /// When a retired key retired (RFC 3339).
    #[serde(default, rename = "retiredAt", skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<String>,
}

/// `POST /projects`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ProjectRequest {
    pub fn id(project_id: impl Into<String>) -> Self {
        ProjectRequest {
            project_id: Some(project_id.into()),
            name: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub project_id: String,
    pub name: String,
    pub created_at: Timestamp,
}

/// `POST /projects/{projectId}/instances`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deactivation_date: Option<String>,
    /// `{dates, location}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl InstanceRequest {
    pub fn id(instance_id: impl Into<String>) -> Self {
        InstanceRequest {
            instance_id: Some(instance_id.into()),
            ..Self::default()
        }
    }
}

/// `PUT /projects/{projectId}/instances/{instanceId}`: the fields to change. A time zone or
/// deactivation date of `Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deactivation_date: Option<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    pub instance_id: String,
    pub project_id: String,
    pub name: String,
    pub active: bool,
    pub deactivated: bool,
    pub time_zone: Option<String>,
    pub deactivation_date: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Documents are read member by member as they are (`document::plain_map`): a member
    /// named `$serde_json::private::...`, stored before the service refused such names,
    /// is not taken for one of serde_json's own values.
    #[serde(default, deserialize_with = "pricing_core::document::plain_map")]
    pub meta: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemSummary {
    pub item_id: String,
    pub product_id: String,
    pub dynamic_pricing: bool,
    pub sold: u64,
    pub reserved: u64,
    pub available: u64,
    pub oversold: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProductSummary {
    pub product_id: String,
    pub capacity: Option<u64>,
    pub sold: u64,
    pub reserved: u64,
    pub available: u64,
    pub oversold: u64,
}

/// How far the instance's log is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Processing {
    pub applied_sequence: u64,
    pub last_sequence: u64,
}

/// `GET /projects/{projectId}/instances/{instanceId}`: the instance with the first pages of
/// its item and product summaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceDetails {
    #[serde(flatten)]
    pub instance: Instance,
    pub items: Vec<ItemSummary>,
    pub items_next: Option<String>,
    pub products: Vec<ProductSummary>,
    pub products_next: Option<String>,
    pub processing: Processing,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    pub start: Timestamp,
    pub end: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemDetails {
    pub item_id: String,
    pub product_id: String,
    #[serde(deserialize_with = "pricing_core::document::plain_map")]
    pub properties: Map<String, Value>,
    #[serde(deserialize_with = "pricing_core::document::plain_map")]
    pub metadata: Map<String, Value>,
    pub dynamic_pricing_periods: Vec<Period>,
    pub sold: u64,
    pub reserved: u64,
    pub available: u64,
    pub oversold: u64,
    #[serde(default)]
    pub total: Option<u64>,
    pub price_matches: Vec<PriceMatch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProductDetails {
    pub product_id: String,
    #[serde(deserialize_with = "pricing_core::document::plain_map")]
    pub properties: Map<String, Value>,
    #[serde(deserialize_with = "pricing_core::document::plain_map")]
    pub metadata: Map<String, Value>,
    pub capacity: Option<u64>,
    pub sold: u64,
    pub reserved: u64,
    pub product_reserved: u64,
    pub available: u64,
    pub oversold: u64,
    pub items: Vec<String>,
    pub items_next: Option<String>,
}

/// One entry: its `type`, optional `transactionId` (the deduplication key) and `data`
/// (per type: see the `*Entry` schemas of the OpenAPI document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    pub data: Value,
}

impl Entry {
    pub fn new(kind: impl Into<String>, data: Value) -> Self {
        Entry {
            kind: kind.into(),
            transaction_id: None,
            data,
        }
    }

    /// The same entry with a transaction id.
    pub fn with_transaction(mut self, transaction_id: impl Into<String>) -> Self {
        self.transaction_id = Some(transaction_id.into());
        self
    }
}

/// An entry as submitted: plain, or a compact JWS signed with a project key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SubmittedEntry {
    Plain(Entry),
    Signed(String),
}

impl From<Entry> for SubmittedEntry {
    fn from(e: Entry) -> Self {
        SubmittedEntry::Plain(e)
    }
}

/// `POST .../entries`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntrySubmission {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub entries: Vec<SubmittedEntry>,
}

impl EntrySubmission {
    pub fn new(entries: impl IntoIterator<Item = Entry>) -> Self {
        EntrySubmission {
            request_id: None,
            entries: entries.into_iter().map(SubmittedEntry::Plain).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryStatus {
    Accepted,
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryOutcome {
    pub index: u64,
    pub transaction_id: Option<String>,
    pub status: EntryStatus,
    pub sequence: u64,
}

/// The answer to a submission: every entry accepted or a duplicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitSummary {
    pub received: u64,
    pub accepted: u64,
    pub duplicates: u64,
    pub entries: Vec<EntryOutcome>,
}

/// `GET .../entries` (`after` a sequence, or a cursor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    pub after: Option<u64>,
    pub page: PageQuery,
}

/// One record of an instance's entry log: the entry as a signed JWT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogRecord {
    pub sequence: u64,
    pub transaction_id: Option<String>,
    pub received_at: Timestamp,
    pub jwt: String,
}

/// `GET .../events`: filter by type and creation time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    pub event_type: Option<EventType>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub page: PageQuery,
}

/// An event of an instance, as `GET .../events` lists it (its webhook carries the same,
/// with the webhook id as `id` and this `id` as `eventId`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub created_at: Timestamp,
    pub project_id: String,
    pub instance_id: String,
    pub data: Value,
}

/// The body of a webhook: the event with its webhook id, API version and subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEnvelope {
    /// The webhook id (also in `webhook-id`; retries reuse it).
    pub id: String,
    /// The event's id, as `GET .../events` lists it (absent from services before
    /// 2026-11-30).
    #[serde(default)]
    pub event_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: EventType,
    #[serde(default)]
    pub api_version: Option<String>,
    pub created_at: Timestamp,
    pub project_id: String,
    #[serde(default)]
    pub subscription_id: Option<String>,
    pub instance_id: String,
    pub data: Value,
}

/// `POST /projects/{projectId}/calculatePrices`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CalculationRequest {
    /// All instances of the project when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_ids: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Calculation {
    pub instance_id: String,
    pub calculation_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calculations {
    pub calculations: Vec<Calculation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemPrice {
    pub item_id: String,
    pub price: f64,
}

/// The latest prices of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstancePrices {
    pub instance_id: String,
    pub calculation_id: Option<String>,
    pub calculated_at: Option<Timestamp>,
    pub sequence: u64,
    pub prices: Vec<ItemPrice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    Schedule,
    Sales,
    Request,
    Manual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriceStatus {
    Calculated,
    Kept,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceHistoryEntry {
    pub sequence: u64,
    pub calculation_id: String,
    pub trigger: Trigger,
    pub calculated_at: Timestamp,
    pub item_id: String,
    pub price: f64,
    pub previous_price: Option<f64>,
    pub changed: bool,
    pub status: PriceStatus,
    pub explanation: Value,
    #[serde(default)]
    pub exposure: Option<Value>,
}

/// `POST .../priceMatches`: `itemId` priced at `sourceItemId`'s price × ratio + offset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceMatchRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_id: Option<String>,
    pub item_id: String,
    pub source_item_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceMatch {
    pub match_id: String,
    pub item_id: String,
    pub source_item_id: String,
    pub ratio: f64,
    pub offset: f64,
}

/// `POST .../subscriptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionRequest {
    pub callback_url: String,
    /// Every event type when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventType>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub subscription_id: String,
    pub project_id: String,
    #[serde(default)]
    pub instance_id: Option<String>,
    pub callback_url: String,
    pub events: Vec<EventType>,
    pub description: String,
    pub status: SubscriptionStatus,
    pub created_at: Timestamp,
    #[serde(default)]
    pub disabled_at: Option<Timestamp>,
    #[serde(default)]
    pub disabled_reason: Option<String>,
}

/// A created subscription with its signing secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionCreated {
    #[serde(flatten)]
    pub subscription: Subscription,
    pub secret: WebhookSecret,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Triggered {
    pub subscription_id: String,
    pub trigger_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRotated {
    pub subscription_id: String,
    pub secret: WebhookSecret,
    pub previous_secret_expires_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    Pending,
    Retrying,
    Succeeded,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryAttempt {
    pub attempt: u32,
    pub attempted_at: Timestamp,
    #[serde(default)]
    pub response_status: Option<u16>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientReport {
    pub message: String,
    #[serde(default)]
    pub status: Option<u16>,
    pub reported_at: Timestamp,
}

/// One webhook of a subscription and its delivery attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub delivery_id: String,
    pub webhook_id: String,
    pub subscription_id: String,
    pub instance_id: String,
    pub event_type: EventType,
    pub event_id: String,
    pub created_at: Timestamp,
    pub attempt: u32,
    pub status: DeliveryStatus,
    #[serde(default)]
    pub response_status: Option<u16>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub attempted_at: Option<Timestamp>,
    #[serde(default)]
    pub next_attempt_at: Option<Timestamp>,
    pub attempts: Vec<DeliveryAttempt>,
    pub client_reports: Vec<ClientReport>,
}

/// `POST /webhooks/errors`: a receiver reports a webhook it could not process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorReport {
    pub webhook_id: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorReportAccepted {
    pub webhook_id: String,
    pub accepted: bool,
}
