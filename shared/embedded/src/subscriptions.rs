//! SubscriptionStore: one row per subscription, by (project, id), listed per scope
//! ((project, instance_id), `''` at project level) in creation order. The signing secrets
//! are a column of their own (`secrets`, JSON), beside the record.

use pricing_core::ids::{InstanceId, ProjectKey, SubscriptionId};
use pricing_core::ports::{StoreError, StoreResult, SubscriptionStore};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{
    Subscription, SubscriptionSecrets, SubscriptionStatus, WebhookSecret,
};
use rusqlite::{Connection, Row, TransactionBehavior, params};

use crate::EmbeddedStore;
use crate::db::{DbResult, is_duplicate_key, text};

/// The scope column: the instance id, or `''` at project level.
fn scope(instance: Option<&InstanceId>) -> String {
    instance.map(ToString::to_string).unwrap_or_default()
}

impl SubscriptionStore for EmbeddedStore {
    async fn create_subscription(
        &self,
        subscription: &Subscription,
        max: usize,
    ) -> StoreResult<bool> {
        let project = subscription.project().storage_key();
        let id = subscription.subscription_id.to_string();
        let scope = scope(subscription.instance_id.as_ref());
        let created = subscription.created_at.millis();
        let record = serde_json::to_string(subscription)
            .map_err(|e| StoreError::Failed(format!("create_subscription: {e}")))?;
        let secrets = subscription
            .secrets
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Failed(format!("create_subscription: {e}")))?;
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.on_writer("create_subscription", move |conn| {
            // Count and insert in one IMMEDIATE transaction: no other writer (of this or
            // another process) can take the last place in between.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let held: i64 = tx
                .prepare_cached(
                    "SELECT COUNT(*) FROM subscriptions WHERE project_id = ?1 AND instance_id = ?2",
                )?
                .query_row(params![project, scope], |r| r.get(0))?;
            if held >= max {
                return Ok(false);
            }
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO subscriptions
                     (project_id, subscription_id, instance_id, created_at, record, secrets)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![project, id, scope, created, record, secrets]);
            match inserted {
                Ok(_) => {}
                Err(e) if is_duplicate_key(&e) => {
                    return Err(StoreError::Conflict(format!("subscription {id} exists")).into());
                }
                Err(e) => return Err(e.into()),
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn get_subscription(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>> {
        let project = project.storage_key();
        let id = id.to_string();
        self.on_reader("get_subscription", move |conn| stored(conn, &project, &id))
            .await
    }

    async fn list_subscriptions(
        &self,
        project: &ProjectKey,
        instance: Option<&InstanceId>,
    ) -> StoreResult<Vec<Subscription>> {
        let project = project.storage_key();
        let scope = scope(instance);
        self.on_reader("list_subscriptions", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record, secrets FROM subscriptions
                 WHERE project_id = ?1 AND instance_id = ?2
                 ORDER BY created_at, subscription_id",
            )?;
            let mut rows = stmt.query(params![project, scope])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(from_row(row)?);
            }
            Ok(out)
        })
        .await
    }

    async fn delete_subscription(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
    ) -> StoreResult<bool> {
        let project = project.storage_key();
        let id = id.to_string();
        self.on_writer("delete_subscription", move |conn| {
            let deleted = conn
                .prepare_cached(
                    "DELETE FROM subscriptions WHERE project_id = ?1 AND subscription_id = ?2",
                )?
                .execute(params![project, id])?;
            Ok(deleted > 0)
        })
        .await
    }

    async fn set_subscription_status(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
        status: SubscriptionStatus,
        at: Timestamp,
        reason: Option<&str>,
    ) -> StoreResult<()> {
        let project = project.storage_key();
        let id = id.to_string();
        let reason = reason.map(str::to_owned);
        self.on_writer("set_subscription_status", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut subscription = stored(&tx, &project, &id)?.ok_or(StoreError::NotFound)?;
            subscription.status = status;
            // Disabled: when and why. Active again: neither.
            match status {
                SubscriptionStatus::Disabled => {
                    subscription.disabled_at = Some(at);
                    subscription.disabled_reason = reason;
                }
                SubscriptionStatus::Active => {
                    subscription.disabled_at = None;
                    subscription.disabled_reason = None;
                }
            }
            tx.prepare_cached(
                "UPDATE subscriptions SET record = ?3 WHERE project_id = ?1 AND subscription_id = ?2",
            )?
            .execute(params![project, id, serde_json::to_string(&subscription)?])?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn rotate_subscription_secret(
        &self,
        project: &ProjectKey,
        id: &SubscriptionId,
        secret: &WebhookSecret,
        at: Timestamp,
    ) -> StoreResult<SubscriptionSecrets> {
        let project = project.storage_key();
        let id = id.to_string();
        let secret = secret.clone();
        self.on_writer("rotate_subscription_secret", move |conn| {
            // Read and write in one IMMEDIATE transaction: racing rotations take turns.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let subscription = stored(&tx, &project, &id)?.ok_or(StoreError::NotFound)?;
            let secrets = SubscriptionSecrets::rotated(subscription.secrets.as_ref(), secret, at);
            tx.prepare_cached(
                "UPDATE subscriptions SET secrets = ?3 WHERE project_id = ?1 AND subscription_id = ?2",
            )?
            .execute(params![project, id, serde_json::to_string(&secrets)?])?;
            tx.commit()?;
            Ok(secrets)
        })
        .await
    }
}

fn stored(conn: &Connection, project: &str, id: &str) -> DbResult<Option<Subscription>> {
    let mut stmt = conn.prepare_cached(
        "SELECT record, secrets FROM subscriptions WHERE project_id = ?1 AND subscription_id = ?2",
    )?;
    let mut rows = stmt.query(params![project, id])?;
    match rows.next()? {
        None => Ok(None),
        Some(row) => Ok(Some(from_row(row)?)),
    }
}

/// A subscription from its `record` and `secrets` columns (in that order).
fn from_row(row: &Row<'_>) -> DbResult<Subscription> {
    let mut subscription: Subscription = serde_json::from_str(text(row, 0)?)?;
    subscription.secrets = match row.get::<_, Option<String>>(1)? {
        Some(json) => Some(serde_json::from_str(&json)?),
        None => None,
    };
    Ok(subscription)
}
