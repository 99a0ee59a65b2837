//! DeliveryStore: one partition per webhook, a listing per subscription, and a sparse
//! index of the deliveries that are waiting for an attempt.
//!
//! | pk | sk | what |
//! |---|---|---|
//! | `D#{webhookId}` | `DELIVERY` | the delivery's state: `record` (who, which event, when created), `att` N (attempts made), `st` S (status), `outcome` (last attempt's result, JSON), `due` S (the next attempt's time, RFC 3339, when there is one), `attempts` L (JSON per attempt), `reports` L (JSON per client report); while not final and due: `gsi1pk = DUE#{shard}`, `gsi1sk = {due ms:015}#{webhookId}` |
//! | `D#{webhookId}` | `EVENT` | the event sent (`record`), written once |
//! | `DL#{pid}/{sid}` | `{created ms:015}#{position:05}#{webhookId}` | listing entry (`wid`) |
//!
//! The event (up to 1,000 prices, ~100 KB) is its own item, so an attempt or a client
//! report rewrites only the small state item (DynamoDB bills a write by the size of the
//! whole item), and the listing reads the state items only (the `record` names the
//! event's id). `create_deliveries` writes the three items of each new delivery in one
//! transaction, conditioned on the state and event items being absent: a delivery is
//! created once and listed iff it exists; the cancellation reasons tell which deliveries
//! exist already, and the rest is tried again without them.
//!
//! `record_attempt` is one UpdateItem conditioned on `att = :previous` and a status that
//! is not final; it appends the attempt and moves (or, once final, removes) the due
//! entry in the same write. `add_client_report` appends under `size(reports) < :max`.
//! `postpone` is one UpdateItem conditioned on the due entry's sort key being the old due
//! time's (and a status that is not final); it sets `due` and the sort key together.
//!
//! Items written before `due` existed keep the next due time in `outcome`
//! (`nextAttemptAt`); `due`, once written, takes precedence.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use pricing_core::ids::{InstanceId, ProjectId, ProjectKey, SubscriptionId, TenantId};
use pricing_core::model::{Event, Page, PageRequest};
use pricing_core::ports::{DeliveryStore, StoreError, StoreResult};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::delivery::MAX_CLIENT_REPORTS;
use pricing_core::webhooks::{
    AttemptUpdate, ClientReport, Delivery, DeliveryStatus, DeliverySummary,
};
use serde::{Deserialize, Serialize};

use super::keys::{self, DUE_SHARDS, GSI1PK, GSI1SK, PK, RECORD, SK};
use super::{
    DynamoStore, Item, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_at,
    failed_count, get_n, get_s, is_condition_failed, n, s,
};
use crate::error::{corrupt, store_error};

const EVENT_SK: &str = "EVENT";
const ATT: &str = "att";
const ST: &str = "st";
const OUTCOME: &str = "outcome";
const DUE: &str = "due";
const ATTEMPTS: &str = "attempts";
const REPORTS: &str = "reports";
const WID: &str = "wid";

/// What a summary reads of a state item (not the due index entry).
const SUMMARY_ATTRIBUTES: &[&str] = &[PK, RECORD, ATT, ST, OUTCOME, DUE, ATTEMPTS, REPORTS];

/// Actions per delivery in `create_deliveries` (state, event, listing entry).
const ACTIONS_PER_DELIVERY: usize = 3;
/// Deliveries per transaction: within 100 actions ...
const DELIVERIES_PER_TRANSACTION: usize = 100 / ACTIONS_PER_DELIVERY;
/// ... and well within the 4 MB of one transaction.
const TRANSACTION_BYTES: usize = 3_500_000;

/// What a delivery is, fixed at creation (the `record` of the state item).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    webhook_id: String,
    subscription_id: SubscriptionId,
    tenant: TenantId,
    project_id: ProjectId,
    instance_id: InstanceId,
    event_type: String,
    /// The event's id: what a summary keeps of the event.
    event_id: String,
    created_at: Timestamp,
}

/// The last attempt's result (`outcome`). The next due time is `due`; items written before
/// it existed hold it here.
#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Outcome {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attempted_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<Timestamp>,
}

fn status_str(status: DeliveryStatus) -> &'static str {
    match status {
        DeliveryStatus::Pending => "pending",
        DeliveryStatus::Retrying => "retrying",
        DeliveryStatus::Succeeded => "succeeded",
        DeliveryStatus::Failed => "failed",
    }
}

fn parse_status(op: &str, v: &str) -> StoreResult<DeliveryStatus> {
    Ok(match v {
        "pending" => DeliveryStatus::Pending,
        "retrying" => DeliveryStatus::Retrying,
        "succeeded" => DeliveryStatus::Succeeded,
        "failed" => DeliveryStatus::Failed,
        other => return Err(corrupt(op, format!("unknown delivery status {other:?}"))),
    })
}

/// The due index entry of a delivery in this state, if it has one.
fn due_entry(
    webhook_id: &str,
    status: DeliveryStatus,
    next: Option<Timestamp>,
) -> Option<(String, String)> {
    match next {
        Some(at) if !status.is_final() => Some((
            keys::due_pk(webhook_id),
            keys::due_sk(at.millis(), webhook_id),
        )),
        _ => None,
    }
}

/// The next due time: `due`, or `outcome`'s on an item written before `due` existed.
fn next_attempt_of(op: &str, state: &Item, outcome: &Outcome) -> StoreResult<Option<Timestamp>> {
    match state.get(DUE) {
        None => Ok(outcome.next_attempt_at),
        Some(AttributeValue::S(at)) => Timestamp::parse(at)
            .map(Some)
            .ok_or_else(|| corrupt(op, format!("{DUE} is not a time: {at:?}"))),
        Some(other) => Err(corrupt(op, format!("{DUE} holds {other:?}"))),
    }
}

/// A list of JSON strings.
fn json_list<T: Serialize>(op: &str, values: &[T]) -> StoreResult<AttributeValue> {
    Ok(AttributeValue::L(
        values
            .iter()
            .map(|v| encode(op, v).map(s))
            .collect::<StoreResult<_>>()?,
    ))
}

fn decode_list<T: serde::de::DeserializeOwned>(
    op: &str,
    item: &Item,
    name: &str,
) -> StoreResult<Vec<T>> {
    match item.get(name) {
        None => Ok(Vec::new()),
        Some(AttributeValue::L(values)) => values
            .iter()
            .map(|v| match v {
                AttributeValue::S(json) => {
                    serde_json::from_str(json).map_err(|e| corrupt(op, format!("{name}: {e}")))
                }
                other => Err(corrupt(op, format!("{name} holds {other:?}"))),
            })
            .collect(),
        Some(other) => Err(corrupt(op, format!("{name} is not a list: {other:?}"))),
    }
}

fn decode_json<T: serde::de::DeserializeOwned>(
    op: &str,
    item: &Item,
    name: &str,
) -> StoreResult<T> {
    serde_json::from_str(get_s(op, item, name)?).map_err(|e| corrupt(op, format!("{name}: {e}")))
}

/// A delivery's summary from its state item alone.
fn summary_of(op: &str, state: &Item) -> StoreResult<DeliverySummary> {
    let meta: Meta = decode(op, state)?;
    let outcome: Outcome = decode_json(op, state, OUTCOME)?;
    let next_attempt_at = next_attempt_of(op, state, &outcome)?;
    Ok(DeliverySummary {
        webhook_id: meta.webhook_id,
        subscription_id: meta.subscription_id,
        tenant: meta.tenant,
        project_id: meta.project_id,
        instance_id: meta.instance_id,
        event_type: meta.event_type,
        event_id: meta.event_id,
        created_at: meta.created_at,
        attempt: u32::try_from(get_n(op, state, ATT)?)
            .map_err(|_| corrupt(op, "attempt count out of range"))?,
        status: parse_status(op, get_s(op, state, ST)?)?,
        response_status: outcome.response_status,
        error: outcome.error,
        attempted_at: outcome.attempted_at,
        next_attempt_at,
        attempts: decode_list(op, state, ATTEMPTS)?,
        client_reports: decode_list(op, state, REPORTS)?,
    })
}

/// A delivery from its state and event items.
fn delivery_of(op: &str, state: &Item, event: &Item) -> StoreResult<Delivery> {
    let DeliverySummary {
        webhook_id,
        subscription_id,
        tenant,
        project_id,
        instance_id,
        event_type,
        event_id,
        created_at,
        attempt,
        status,
        response_status,
        error,
        attempted_at,
        next_attempt_at,
        attempts,
        client_reports,
    } = summary_of(op, state)?;
    let event: Event = decode(op, event)?;
    if event.id != event_id {
        return Err(corrupt(
            op,
            format!(
                "delivery {webhook_id} names event {event_id} but holds {}",
                event.id
            ),
        ));
    }
    Ok(Delivery {
        webhook_id,
        subscription_id,
        tenant,
        project_id,
        instance_id,
        event_type,
        created_at,
        attempt,
        status,
        response_status,
        error,
        attempted_at,
        next_attempt_at,
        attempts,
        client_reports,
        event,
    })
}

/// The three items of a new delivery, encoded.
struct NewDelivery {
    webhook_id: String,
    state: Item,
    event: Item,
    listing: Item,
    bytes: usize,
}

/// How long after its creation a delivery's event and listing entry expire beyond the
/// retention: longer than the whole retry schedule (about 31 hours with jitter), so they
/// outlast the state item, which expires the retention after the final attempt.
const EXPIRY_MARGIN_MS: i64 = 2 * 86_400_000;

impl NewDelivery {
    /// `expiry`: the TTL attribute of the event and the listing entry (the state item
    /// gets one when the delivery becomes final).
    fn new(
        op: &str,
        d: &Delivery,
        position: usize,
        expiry: Option<(&'static str, AttributeValue)>,
    ) -> StoreResult<Self> {
        let pk = keys::delivery_pk(&d.webhook_id);
        let meta = encode(
            op,
            &Meta {
                webhook_id: d.webhook_id.clone(),
                subscription_id: d.subscription_id.clone(),
                tenant: d.tenant.clone(),
                project_id: d.project_id.clone(),
                instance_id: d.instance_id.clone(),
                event_type: d.event_type.clone(),
                event_id: d.event.id.clone(),
                created_at: d.created_at,
            },
        )?;
        let outcome = encode(
            op,
            &Outcome {
                response_status: d.response_status,
                error: d.error.clone(),
                attempted_at: d.attempted_at,
                next_attempt_at: None,
            },
        )?;
        let event = encode(op, &d.event)?;
        let mut state = Item::from([
            (PK.to_owned(), s(&pk)),
            (SK.to_owned(), s(keys::DELIVERY_SK)),
            (RECORD.to_owned(), s(meta)),
            (ATT.to_owned(), n(u64::from(d.attempt))),
            (ST.to_owned(), s(status_str(d.status))),
            (OUTCOME.to_owned(), s(outcome)),
            (ATTEMPTS.to_owned(), json_list(op, &d.attempts)?),
            (REPORTS.to_owned(), json_list(op, &d.client_reports)?),
        ]);
        if let Some(at) = d.next_attempt_at {
            state.insert(DUE.to_owned(), s(at.to_rfc3339()));
        }
        if let Some((gpk, gsk)) = due_entry(&d.webhook_id, d.status, d.next_attempt_at) {
            state.insert(GSI1PK.to_owned(), s(gpk));
            state.insert(GSI1SK.to_owned(), s(gsk));
        }
        let bytes = event.len() + 2_000;
        let mut event = Item::from([
            (PK.to_owned(), s(&pk)),
            (SK.to_owned(), s(EVENT_SK)),
            (RECORD.to_owned(), s(event)),
        ]);
        let mut listing = Item::from([
            (
                PK.to_owned(),
                s(keys::delivery_listing_pk(&d.project(), &d.subscription_id)),
            ),
            (
                SK.to_owned(),
                s(keys::delivery_listing_sk(
                    d.created_at.millis(),
                    position,
                    &d.webhook_id,
                )),
            ),
            (WID.to_owned(), s(&d.webhook_id)),
        ]);
        if let Some((name, at)) = expiry {
            event.insert(name.to_owned(), at.clone());
            listing.insert(name.to_owned(), at);
        }
        Ok(NewDelivery {
            webhook_id: d.webhook_id.clone(),
            state,
            event,
            listing,
            bytes,
        })
    }

    fn actions(&self, table: &str, op: &str) -> StoreResult<[TransactWriteItem; 3]> {
        let put = |item: &Item, conditional: bool| -> StoreResult<TransactWriteItem> {
            let mut p = Put::builder()
                .table_name(table)
                .set_item(Some(item.clone()));
            if conditional {
                p = p.condition_expression("attribute_not_exists(pk)");
            }
            Ok(TransactWriteItem::builder()
                .put(built(op, p.build())?)
                .build())
        };
        Ok([
            put(&self.state, true)?,
            put(&self.event, true)?,
            put(&self.listing, false)?,
        ])
    }
}

impl DeliveryStore for DynamoStore {
    async fn create_deliveries(&self, deliveries: &[Delivery]) -> StoreResult<Vec<String>> {
        const OP: &str = "create_deliveries";
        let mut seen = HashSet::new();
        let mut pending = Vec::with_capacity(deliveries.len());
        for (position, d) in deliveries.iter().enumerate() {
            if seen.insert(d.webhook_id.as_str()) {
                let expiry = Timestamp::from_millis(d.created_at.millis() + EXPIRY_MARGIN_MS)
                    .and_then(|at| self.expiry(pricing_core::retention::Class::Deliveries, at));
                pending.push(NewDelivery::new(OP, d, position, expiry)?);
            }
        }
        let mut created = Vec::new();
        // Chunks that fit one transaction.
        let mut chunks: Vec<Vec<NewDelivery>> = Vec::new();
        let mut bytes = 0;
        for d in pending {
            match chunks.last_mut() {
                Some(chunk)
                    if chunk.len() < DELIVERIES_PER_TRANSACTION
                        && bytes + d.bytes <= TRANSACTION_BYTES =>
                {
                    bytes += d.bytes;
                    chunk.push(d);
                }
                _ => {
                    bytes = d.bytes;
                    chunks.push(vec![d]);
                }
            }
        }
        for mut chunk in chunks {
            let mut attempt = 0;
            while !chunk.is_empty() {
                attempt += 1;
                let mut actions = Vec::with_capacity(chunk.len() * ACTIONS_PER_DELIVERY);
                for d in &chunk {
                    actions.extend(d.actions(self.table(), OP)?);
                }
                match self.transact(OP, actions).await? {
                    Ok(()) => {
                        created.extend(chunk.drain(..).map(|d| d.webhook_id));
                    }
                    Err(reasons) => {
                        // Those whose state or event item exists are stored already.
                        let before = chunk.len();
                        let mut index = 0;
                        chunk.retain(|_| {
                            let first = index * ACTIONS_PER_DELIVERY;
                            index += 1;
                            !(failed_at(&reasons, first) || failed_at(&reasons, first + 1))
                        });
                        if chunk.len() == before {
                            // Only conflicts with other transactions: again, later.
                            if attempt >= MAX_ATTEMPTS {
                                return Err(StoreError::Unavailable(format!(
                                    "{OP}: still contended after {MAX_ATTEMPTS} attempts"
                                )));
                            }
                            tracing::debug!(
                                attempt,
                                failed = failed_count(&reasons),
                                "create_deliveries cancelled; again"
                            );
                            backoff(attempt).await;
                        }
                    }
                }
            }
        }
        // Input order.
        let order: HashMap<&str, usize> = deliveries
            .iter()
            .enumerate()
            .rev()
            .map(|(i, d)| (d.webhook_id.as_str(), i))
            .collect();
        created.sort_by_key(|id| order.get(id.as_str()).copied().unwrap_or(usize::MAX));
        Ok(created)
    }

    async fn get_delivery(&self, webhook_id: &str) -> StoreResult<Option<Delivery>> {
        const OP: &str = "get_delivery";
        // Both items of the partition, in one strongly consistent query.
        let q = Query::new("pk = :pk").value(":pk", s(keys::delivery_pk(webhook_id)));
        let items = self.query(OP, q).await?;
        let find = |sk: &str| {
            items.iter().find(|i| {
                i.get(SK)
                    .and_then(|v| v.as_s().ok())
                    .is_some_and(|v| v == sk)
            })
        };
        let Some(state) = find(keys::DELIVERY_SK) else {
            return Ok(None);
        };
        let Some(event) = find(EVENT_SK) else {
            // A final delivery past its retention: TTL deletes its items in no order.
            if state.contains_key(super::TTL_ATTRIBUTE) {
                return Ok(None);
            }
            return Err(corrupt(OP, format!("delivery {webhook_id} has no event")));
        };
        delivery_of(OP, state, event).map(Some)
    }

    async fn record_attempt(&self, webhook_id: &str, update: &AttemptUpdate) -> StoreResult<bool> {
        const OP: &str = "record_attempt";
        let pk = keys::delivery_pk(webhook_id);
        let Some(previous) = update.attempt.checked_sub(1) else {
            // Attempt 0 is never the next one.
            return self.require(OP, &pk).await.map(|()| false);
        };
        let outcome = encode(
            OP,
            &Outcome {
                response_status: update.response_status,
                error: update.error.clone(),
                attempted_at: Some(update.attempted_at),
                next_attempt_at: None,
            },
        )?;
        let mut req = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(&pk))
            .key(SK, s(keys::DELIVERY_SK))
            .condition_expression(
                "attribute_exists(pk) AND att = :previous AND (st = :pending OR st = :retrying)",
            )
            .expression_attribute_values(":previous", n(u64::from(previous)))
            .expression_attribute_values(":pending", s(status_str(DeliveryStatus::Pending)))
            .expression_attribute_values(":retrying", s(status_str(DeliveryStatus::Retrying)))
            .expression_attribute_values(":att", n(u64::from(update.attempt)))
            .expression_attribute_values(":st", s(status_str(update.status)))
            .expression_attribute_values(":outcome", s(outcome))
            .expression_attribute_values(
                ":attempt",
                json_list(OP, std::slice::from_ref(&update.record))?,
            );
        let mut set = "SET att = :att, st = :st, outcome = :outcome, \
                       attempts = list_append(attempts, :attempt)"
            .to_owned();
        let mut remove = Vec::new();
        match update.next_attempt_at {
            Some(at) => {
                set.push_str(", due = :due");
                req = req.expression_attribute_values(":due", s(at.to_rfc3339()));
            }
            None => remove.push(DUE),
        }
        match due_entry(webhook_id, update.status, update.next_attempt_at) {
            Some((gpk, gsk)) => {
                set.push_str(", gsi1pk = :due_pk, gsi1sk = :due_sk");
                req = req
                    .expression_attribute_values(":due_pk", s(gpk))
                    .expression_attribute_values(":due_sk", s(gsk));
            }
            None => remove.extend([GSI1PK, GSI1SK]),
        }
        // A final delivery is kept for the retention after its last attempt.
        if update.status.is_final()
            && let Some((name, at)) = self.expiry(
                pricing_core::retention::Class::Deliveries,
                update.attempted_at,
            )
        {
            set.push_str(&format!(", {name} = :expires"));
            req = req.expression_attribute_values(":expires", at);
        }
        if !remove.is_empty() {
            set.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        req = req.update_expression(set);
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failed(&e) => self.require(OP, &pk).await.map(|()| false),
            Err(e) => Err(store_error(OP, e)),
        }
    }

    async fn postpone(
        &self,
        webhook_id: &str,
        due: Timestamp,
        until: Timestamp,
    ) -> StoreResult<bool> {
        const OP: &str = "postpone";
        let pk = keys::delivery_pk(webhook_id);
        // The due entry exists while the delivery is not final and has a next attempt, and
        // its sort key names the due time (in milliseconds; `due`, when stored, exactly).
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(&pk))
            .key(SK, s(keys::DELIVERY_SK))
            .update_expression("SET due = :until, gsi1sk = :until_sk")
            .condition_expression(
                "gsi1sk = :due_sk AND (st = :pending OR st = :retrying) \
                 AND (attribute_not_exists(due) OR due = :due)",
            )
            .expression_attribute_values(":due_sk", s(keys::due_sk(due.millis(), webhook_id)))
            .expression_attribute_values(":due", s(due.to_rfc3339()))
            .expression_attribute_values(":pending", s(status_str(DeliveryStatus::Pending)))
            .expression_attribute_values(":retrying", s(status_str(DeliveryStatus::Retrying)))
            .expression_attribute_values(":until", s(until.to_rfc3339()))
            .expression_attribute_values(":until_sk", s(keys::due_sk(until.millis(), webhook_id)))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failed(&e) => self.require(OP, &pk).await.map(|()| false),
            Err(e) => Err(store_error(OP, e)),
        }
    }

    async fn add_client_report(&self, webhook_id: &str, report: &ClientReport) -> StoreResult<()> {
        const OP: &str = "add_client_report";
        let pk = keys::delivery_pk(webhook_id);
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(&pk))
            .key(SK, s(keys::DELIVERY_SK))
            .update_expression("SET reports = list_append(reports, :report)")
            .condition_expression("attribute_exists(pk) AND size(reports) < :max")
            .expression_attribute_values(":report", json_list(OP, std::slice::from_ref(report))?)
            .expression_attribute_values(":max", n(MAX_CLIENT_REPORTS as u64))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Full: the first reports are kept, this one is dropped.
            Err(e) if is_condition_failed(&e) => self.require(OP, &pk).await,
            Err(e) => Err(store_error(OP, e)),
        }
    }

    async fn list_deliveries(
        &self,
        project: &ProjectKey,
        subscription: &SubscriptionId,
        page: &PageRequest,
    ) -> StoreResult<Page<DeliverySummary>> {
        const OP: &str = "list_deliveries";
        let pk = keys::delivery_listing_pk(project, subscription);
        let mut q = Query::new("pk = :pk")
            .value(":pk", s(pk.clone()))
            .max(page.limit.saturating_add(1));
        q.forward = false;
        if let Some(cursor) = &page.cursor {
            if !is_listing_cursor(cursor) {
                return Err(StoreError::NotFound);
            }
            q = q.after(pk.clone(), cursor.clone());
        }
        let mut entries = Vec::new();
        for entry in self.query(OP, q).await? {
            entries.push((
                get_s(OP, &entry, SK)?.to_owned(),
                get_s(OP, &entry, WID)?.to_owned(),
                entry.contains_key(super::TTL_ATTRIBUTE),
            ));
        }
        // The state items only: the events (up to ~100 KB each) are not read.
        let wanted = entries
            .iter()
            .map(|(_, wid, _)| (keys::delivery_pk(wid), keys::DELIVERY_SK.to_owned()))
            .collect();
        let mut states: HashMap<String, Item> = HashMap::new();
        for item in self
            .batch_get_projected(OP, wanted, SUMMARY_ATTRIBUTES)
            .await?
        {
            states.insert(get_s(OP, &item, PK)?.to_owned(), item);
        }
        let mut listed = Vec::with_capacity(entries.len());
        for (sk, wid, expires) in entries {
            let Some(state) = states.get(&keys::delivery_pk(&wid)) else {
                // Past its retention, the state item may go before the listing entry.
                if expires {
                    continue;
                }
                return Err(corrupt(
                    OP,
                    format!("delivery {wid} is listed but not stored"),
                ));
            };
            listed.push((sk, summary_of(OP, state)?));
        }
        let page_of = super::projects::page_of(listed, page.limit, |(sk, _)| sk.clone());
        Ok(Page {
            items: page_of.items.into_iter().map(|(_, d)| d).collect(),
            next: page_of.next,
        })
    }

    async fn overdue_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<String>> {
        const OP: &str = "overdue_deliveries";
        if limit == 0 {
            return Ok(Vec::new());
        }
        let bound = keys::millis_key(before.millis());
        // The oldest `limit` of each shard, then the oldest `limit` of those.
        let mut candidates: Vec<(String, String)> = Vec::new();
        for shard in 0..DUE_SHARDS {
            let mut q = Query::new("gsi1pk = :due AND gsi1sk < :before")
                .value(":due", s(keys::due_shard_pk(shard)))
                .value(":before", s(bound.clone()))
                .max(limit);
            q.index = Some(keys::GSI1);
            for item in self.query(OP, q).await? {
                let pk = get_s(OP, &item, PK)?;
                let Some(wid) = pk.strip_prefix("D#") else {
                    tracing::warn!(pk, "due entry on an unexpected item; skipped");
                    continue;
                };
                candidates.push((get_s(OP, &item, GSI1SK)?.to_owned(), wid.to_owned()));
            }
        }
        candidates.sort();
        candidates.truncate(limit);
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        // The index lags behind the table: check each against a consistent read.
        let wanted = candidates
            .iter()
            .map(|(_, wid)| (keys::delivery_pk(wid), keys::DELIVERY_SK.to_owned()))
            .collect();
        let mut current: HashMap<String, (String, Option<String>)> = HashMap::new();
        for item in self
            .batch_get_projected(OP, wanted, &[PK, ST, GSI1SK])
            .await?
        {
            let sk = item.get(GSI1SK).and_then(|v| v.as_s().ok()).cloned();
            current.insert(
                get_s(OP, &item, PK)?.to_owned(),
                (get_s(OP, &item, ST)?.to_owned(), sk),
            );
        }
        let mut out = Vec::with_capacity(candidates.len());
        for (_, wid) in candidates {
            if let Some((st, Some(due))) = current.get(&keys::delivery_pk(&wid))
                && !parse_status(OP, st)?.is_final()
                && *due < bound
            {
                out.push(wid);
            }
        }
        Ok(out)
    }
}

/// Whether a cursor has the shape of a listing sort key (`{15 digits}#{5 digits}#{id}`).
fn is_listing_cursor(cursor: &str) -> bool {
    let mut parts = cursor.splitn(3, '#');
    let digits = |p: Option<&str>, len: usize| {
        p.is_some_and(|p| p.len() == len && p.bytes().all(|b| b.is_ascii_digit()))
    };
    digits(parts.next(), 15)
        && digits(parts.next(), 5)
        && parts.next().is_some_and(|w| !w.is_empty())
}

impl DynamoStore {
    /// Whether the delivery state item exists (consistent read of its key only).
    /// `Ok` when the delivery exists, `NotFound` otherwise: a failed condition on an
    /// existing delivery is a refusal, on a missing one an unknown id.
    async fn require(&self, op: &str, pk: &str) -> StoreResult<()> {
        match self
            .get_projected(op, pk.to_owned(), keys::DELIVERY_SK, &[PK])
            .await?
        {
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_cursors_are_recognised() {
        assert!(is_listing_cursor(&keys::delivery_listing_sk(
            1_700_000_000_000,
            3,
            "wh_ab"
        )));
        assert!(!is_listing_cursor(""));
        assert!(!is_listing_cursor("123#00001#wh"));
        assert!(!is_listing_cursor("000000000000001#00001#"));
    }

    #[test]
    fn only_waiting_deliveries_are_due() {
        let t = Timestamp::from_millis(1_000).expect("time");
        assert!(due_entry("wh_a", DeliveryStatus::Pending, Some(t)).is_some());
        assert!(due_entry("wh_a", DeliveryStatus::Retrying, Some(t)).is_some());
        assert!(due_entry("wh_a", DeliveryStatus::Retrying, None).is_none());
        assert!(due_entry("wh_a", DeliveryStatus::Failed, Some(t)).is_none());
        assert!(due_entry("wh_a", DeliveryStatus::Succeeded, Some(t)).is_none());
    }
}
