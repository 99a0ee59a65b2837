//! SubscriptionStore: subscriptions in their project's partition `P#{pid}`.
//!
//! | sk | what |
//! |---|---|
//! | `SUB#{sid}` | the subscription (`record`), its signing secrets (`secrets`, JSON; absent on subscriptions from before them), its scope (`sub_scope`) and ordinal (`ord`) |
//! | `SUBN#{scope}` | the scope's counter: `n` subscriptions now, `next_ord` ordinals handed out |
//! | `SUBL#{scope}/{ord:020}` | the scope's listing entry (`sid`), in creation order |
//!
//! The scope is `P` (project level) or `I#{iid}` (one instance). Creating one is one
//! transaction: the counter moves from the values read (`n = :n AND next_ord = :ord`, the
//! read `n` being below the limit), the subscription and the listing entry are put if
//! absent. Two creators racing for the last place both read the same counter, so only one
//! transaction lands; the other reads again and finds the scope full. Deleting is one
//! transaction too: the subscription (if it still exists), its listing entry, and the
//! counter decremented. Listing reads the scope's entries (one query, strongly consistent)
//! and the subscriptions they name (one BatchGetItem): at most one scope's worth, however
//! many instances the project has. A status change writes `record` only and a secret
//! rotation `secrets` only (conditional on the secrets it read), so neither undoes the other.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem, Update};
use pricing_core::ids::{InstanceId, ProjectKey, SubscriptionId};
use pricing_core::ports::{StoreError, StoreResult, SubscriptionStore};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{
    Subscription, SubscriptionSecrets, SubscriptionStatus, WebhookSecret,
};

use super::keys::{self, COUNT, PK, RECORD, SK};
use super::{
    DynamoStore, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_at, failed_count,
    get_n, get_n_opt, get_s, is_condition_failed, n, s,
};
use crate::error::{corrupt, store_error};

const SCOPE: &str = "sub_scope";
const ORD: &str = "ord";
const NEXT_ORD: &str = "next_ord";
const SID: &str = "sid";
const SECRETS: &str = "secrets";

impl SubscriptionStore for DynamoStore {
    async fn create_subscription(
        &self,
        subscription: &Subscription,
        max: usize,
    ) -> StoreResult<bool> {
        const OP: &str = "create_subscription";
        let pk = keys::project_pk(&subscription.project());
        let scope = keys::subscription_scope(subscription.instance_id.as_ref());
        let counter_sk = keys::subscription_counter_sk(&scope);
        let record = encode(OP, subscription)?;
        let secrets = subscription
            .secrets
            .as_ref()
            .map(|x| encode(OP, x))
            .transpose()?;
        for attempt in 1..=MAX_ATTEMPTS {
            let counter = self.get(OP, pk.clone(), &counter_sk).await?;
            let (count, last_ord) = match &counter {
                Some(item) => (
                    get_n_opt(OP, item, COUNT)?.unwrap_or(0),
                    get_n_opt(OP, item, NEXT_ORD)?.unwrap_or(0),
                ),
                None => (0, 0),
            };
            if count >= max as u64 {
                return Ok(false);
            }
            let ord = last_ord + 1;
            let update = Update::builder()
                .table_name(self.table())
                .key(PK, s(&pk))
                .key(SK, s(&counter_sk))
                .update_expression("SET n = :count, next_ord = :ord")
                .expression_attribute_values(":count", n(count + 1))
                .expression_attribute_values(":ord", n(ord));
            let update = match counter {
                None => update.condition_expression("attribute_not_exists(pk)"),
                Some(_) => update
                    .condition_expression("n = :read AND next_ord = :last")
                    .expression_attribute_values(":read", n(count))
                    .expression_attribute_values(":last", n(last_ord)),
            };
            let put = |sk: String| {
                Put::builder()
                    .table_name(self.table())
                    .item(PK, s(&pk))
                    .item(SK, s(sk))
                    .condition_expression("attribute_not_exists(pk)")
            };
            let subscription_put =
                put(keys::subscription_sk(subscription.subscription_id.as_str()))
                    .item(RECORD, s(&record))
                    .item(SCOPE, s(&scope))
                    .item(ORD, n(ord));
            let subscription_put = match &secrets {
                Some(secrets) => subscription_put.item(SECRETS, s(secrets)),
                None => subscription_put,
            };
            let listing_put = put(keys::subscription_listing_sk(&scope, ord))
                .item(SID, s(subscription.subscription_id.to_string()));
            let actions = vec![
                TransactWriteItem::builder()
                    .update(built(OP, update.build())?)
                    .build(),
                TransactWriteItem::builder()
                    .put(built(OP, subscription_put.build())?)
                    .build(),
                TransactWriteItem::builder()
                    .put(built(OP, listing_put.build())?)
                    .build(),
            ];
            match self.transact(OP, actions).await? {
                Ok(()) => return Ok(true),
                Err(reasons) if failed_at(&reasons, 1) => {
                    return Err(StoreError::Conflict(format!(
                        "subscription {} exists",
                        subscription.subscription_id
                    )));
                }
                // The counter moved (another create or delete in the scope): read again.
                Err(reasons) => {
                    tracing::debug!(
                        pk,
                        attempt,
                        failed = failed_count(&reasons),
                        "create_subscription cancelled; again"
                    );
                    backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: the subscriptions of {} still contended after {MAX_ATTEMPTS} attempts",
            subscription.project_id
        )))
    }

    async fn get_subscription(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>> {
        const OP: &str = "get_subscription";
        self.get(
            OP,
            keys::project_pk(project),
            &keys::subscription_sk(id.as_str()),
        )
        .await?
        .map(|item| decode_subscription(OP, &item))
        .transpose()
    }

    async fn list_subscriptions(
        &self,
        project: &ProjectKey,
        instance: Option<&InstanceId>,
    ) -> StoreResult<Vec<Subscription>> {
        const OP: &str = "list_subscriptions";
        let pk = keys::project_pk(project);
        let scope = keys::subscription_scope(instance);
        let q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
            .value(":pk", s(pk.clone()))
            .value(":prefix", s(keys::subscription_listing_prefix(&scope)));
        let mut ids = Vec::new();
        for entry in self.query(OP, q).await? {
            ids.push(get_s(OP, &entry, SID)?.to_owned());
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let wanted = ids
            .iter()
            .map(|id| (pk.clone(), keys::subscription_sk(id)))
            .collect();
        let mut by_id: HashMap<String, Subscription> = HashMap::with_capacity(ids.len());
        for item in self.batch_get(OP, wanted).await? {
            let sub = decode_subscription(OP, &item)?;
            by_id.insert(sub.subscription_id.to_string(), sub);
        }
        // A subscription deleted between the two reads is simply not listed.
        Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
    }

    async fn delete_subscription(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
    ) -> StoreResult<bool> {
        const OP: &str = "delete_subscription";
        let pk = keys::project_pk(project);
        let sk = keys::subscription_sk(id.as_str());
        for attempt in 1..=MAX_ATTEMPTS {
            let Some(item) = self.get(OP, pk.clone(), &sk).await? else {
                return Ok(false);
            };
            let scope = get_s(OP, &item, SCOPE)?.to_owned();
            let ord = get_n(OP, &item, ORD)?;
            let delete = |sk: String| {
                Delete::builder()
                    .table_name(self.table())
                    .key(PK, s(&pk))
                    .key(SK, s(sk))
            };
            let subscription_delete =
                delete(sk.clone()).condition_expression("attribute_exists(pk)");
            let listing_delete = delete(keys::subscription_listing_sk(&scope, ord));
            let counter = Update::builder()
                .table_name(self.table())
                .key(PK, s(&pk))
                .key(SK, s(keys::subscription_counter_sk(&scope)))
                .update_expression("SET n = n - :one")
                .condition_expression("n >= :one")
                .expression_attribute_values(":one", n(1));
            let actions = vec![
                TransactWriteItem::builder()
                    .delete(built(OP, subscription_delete.build())?)
                    .build(),
                TransactWriteItem::builder()
                    .delete(built(OP, listing_delete.build())?)
                    .build(),
                TransactWriteItem::builder()
                    .update(built(OP, counter.build())?)
                    .build(),
            ];
            match self.transact(OP, actions).await? {
                Ok(()) => return Ok(true),
                // Deleted meanwhile: the next read says so.
                Err(reasons) => {
                    tracing::debug!(
                        pk,
                        attempt,
                        failed = failed_count(&reasons),
                        "delete_subscription cancelled; again"
                    );
                    if !failed_at(&reasons, 0) {
                        backoff(attempt).await;
                    }
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: {project}/{id} still contended after {MAX_ATTEMPTS} attempts"
        )))
    }

    async fn set_subscription_status(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
        status: SubscriptionStatus,
        at: Timestamp,
        reason: Option<&str>,
    ) -> StoreResult<()> {
        const OP: &str = "set_subscription_status";
        let pk = keys::project_pk(project);
        let sk = keys::subscription_sk(id.as_str());
        let Some(item) = self.get(OP, pk.clone(), &sk).await? else {
            return Err(StoreError::NotFound);
        };
        let mut sub: Subscription = decode(OP, &item)?;
        sub.status = status;
        match status {
            SubscriptionStatus::Disabled => {
                sub.disabled_at = Some(at);
                sub.disabled_reason = reason.map(str::to_owned);
            }
            SubscriptionStatus::Active => {
                sub.disabled_at = None;
                sub.disabled_reason = None;
            }
        }
        // Only the status fields of the record change after creation (the secrets are an
        // attribute of their own), and they are written whole, so a plain overwrite of the
        // record is right; the condition keeps a deleted one deleted.
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(&pk))
            .key(SK, s(&sk))
            .update_expression("SET #record = :record")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#record", RECORD)
            .expression_attribute_values(":record", s(encode(OP, &sub)?))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if is_condition_failed(&e) => Err(StoreError::NotFound),
            Err(e) => Err(store_error(OP, e)),
        }
    }

    async fn rotate_subscription_secret(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
        secret: &WebhookSecret,
        at: Timestamp,
    ) -> StoreResult<SubscriptionSecrets> {
        const OP: &str = "rotate_subscription_secret";
        let pk = keys::project_pk(project);
        let sk = keys::subscription_sk(id.as_str());
        for attempt in 1..=MAX_ATTEMPTS {
            let Some(item) = self.get(OP, pk.clone(), &sk).await? else {
                return Err(StoreError::NotFound);
            };
            let read = item.get(SECRETS).cloned();
            let stored = stored_secrets(OP, &item)?;
            let secrets = SubscriptionSecrets::rotated(stored.as_ref(), secret.clone(), at);
            // Written only over the secrets read: a racing rotation makes this one read
            // again and rotate on top of it.
            let update = self
                .client
                .update_item()
                .table_name(self.table())
                .key(PK, s(&pk))
                .key(SK, s(&sk))
                .update_expression("SET #secrets = :secrets")
                .expression_attribute_names("#secrets", SECRETS)
                .expression_attribute_values(":secrets", s(encode(OP, &secrets)?));
            let update = match read {
                Some(read) => update
                    .condition_expression("attribute_exists(pk) AND #secrets = :read")
                    .expression_attribute_values(":read", read),
                None => update.condition_expression(
                    "attribute_exists(pk) AND attribute_not_exists(#secrets)",
                ),
            };
            match update.send().await {
                Ok(_) => return Ok(secrets),
                // Rotated (or deleted) meanwhile: the next read says which.
                Err(e) if is_condition_failed(&e) => {
                    tracing::debug!(pk, attempt, "rotate_subscription_secret raced; again");
                    backoff(attempt).await;
                }
                Err(e) => return Err(store_error(OP, e)),
            }
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: {project}/{id} still contended after {MAX_ATTEMPTS} attempts"
        )))
    }
}

/// A subscription from its item: the record, with the secrets beside it.
fn decode_subscription(op: &str, item: &super::Item) -> StoreResult<Subscription> {
    let mut subscription: Subscription = decode(op, item)?;
    subscription.secrets = stored_secrets(op, item)?;
    Ok(subscription)
}

fn stored_secrets(op: &str, item: &super::Item) -> StoreResult<Option<SubscriptionSecrets>> {
    match item.get(SECRETS) {
        None => Ok(None),
        Some(_) => serde_json::from_str(get_s(op, item, SECRETS)?)
            .map(Some)
            .map_err(|e| {
                corrupt(
                    op,
                    format!("the secrets of a subscription do not decode: {e}"),
                )
            }),
    }
}
