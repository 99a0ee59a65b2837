//! RateLimit on DynamoDB: a fixed-window counter per tenant, shared by every Lambda
//! instance. One conditional UpdateItem per request and nothing else:
//!
//! `pk = RL#{tenant}`, `sk = W#{width ms}/{window index}`,
//! `ADD n :one SET expires_at = :end` if `attribute_not_exists(n) OR n < :limit`.
//!
//! A failed condition is the tenant's window being full: `Limited` until the window ends.
//! The item of a window is deleted by the table's TTL (`expires_at`, the window's end in
//! epoch seconds) some time after it ends; until then it is never read again. A throttled
//! counter item means its tenant sends more than DynamoDB takes on one key (about 1,000
//! writes a second): that tenant is limited for a second, nobody else is.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use pricing_core::ids::TenantId;
use pricing_core::limits::RateWindow;
use pricing_core::ports::{Admission, RateLimit, StoreResult};
use pricing_core::time::Timestamp;

use super::keys::{self, PK, SK};
use super::{DynamoStore, is_condition_failed, n, s};
use crate::error::{code, store_error};

/// The TTL attribute of the table (template.yaml `TimeToLiveSpecification`).
pub const TTL_ATTRIBUTE: &str = "expires_at";

/// Throttling of the counter item: its tenant is over what one key takes.
const THROTTLED: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

/// The per-tenant request limit on the stack's table. Cheap to clone.
#[derive(Clone)]
pub struct DynamoRateLimit {
    client: Client,
    table: Arc<str>,
    window: RateWindow,
}

impl std::fmt::Debug for DynamoRateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoRateLimit")
            .field("table", &self.table)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl DynamoRateLimit {
    /// Counts on `store`'s table.
    pub fn new(store: &DynamoStore, window: RateWindow) -> Self {
        DynamoRateLimit {
            client: store.client().clone(),
            table: Arc::from(store.table()),
            window,
        }
    }

    pub fn window(&self) -> RateWindow {
        self.window
    }
}

impl RateLimit for DynamoRateLimit {
    async fn admit(&self, tenant: &TenantId, now: Timestamp) -> StoreResult<Admission> {
        const OP: &str = "rate_limit";
        let (index, left_ms) = self.window.locate(now.millis());
        let width_ms = u64::try_from(self.window.window.as_millis()).unwrap_or(u64::MAX);
        let now_ms = u64::try_from(now.millis()).unwrap_or(0);
        let end_secs = (now_ms + left_ms).div_ceil(1000);
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .key(PK, s(keys::rate_pk(tenant)))
            .key(SK, s(keys::rate_sk(width_ms, index)))
            .update_expression("ADD n :one SET #ttl = :end")
            .condition_expression("attribute_not_exists(n) OR n < :limit")
            .expression_attribute_names("#ttl", TTL_ATTRIBUTE)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":end", n(end_secs))
            .expression_attribute_values(":limit", n(self.window.limit))
            .send()
            .await;
        match result {
            Ok(_) => Ok(Admission::Admitted),
            Err(e) if is_condition_failed(&e) => Ok(Admission::Limited {
                retry_after: Duration::from_millis(left_ms),
            }),
            Err(e) if code(&e).is_some_and(|c| THROTTLED.contains(&c)) => {
                tracing::warn!(%tenant, "rate limit counter throttled; the tenant is limited");
                Ok(Admission::Limited {
                    retry_after: Duration::from_secs(1),
                })
            }
            Err(e) => Err(store_error(OP, e)),
        }
    }
}
