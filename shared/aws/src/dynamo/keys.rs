//! The key layout of the table (docs/aws.md). Ids never contain `#` or `/` (their charset
//! is `A-Z a-z 0-9 . _ : ~ -`), so the separators below are unambiguous; transaction ids
//! may contain `#` but only ever end a key.

use pricing_core::ids::{InstanceId, InstanceKey, ProjectId, ProjectKey, SubscriptionId, TenantId};

pub(crate) const PK: &str = "pk";
pub(crate) const SK: &str = "sk";
pub(crate) const GSI1: &str = "gsi1";

/// Attributes.
pub(crate) const RECORD: &str = "record";
pub(crate) const TENANT: &str = "tenant";
pub(crate) const APPLIED_SEQ: &str = "applied_seq";
pub(crate) const REV: &str = "rev";
/// On an instance item: its record's `updatedAt` (RFC 3339), what a replace is
/// conditional on. Items written before it was kept have none.
pub(crate) const UPDATED_AT: &str = "updated_at";
pub(crate) const LAST_SEQ: &str = "last_seq";
pub(crate) const SEQ: &str = "seq";
pub(crate) const IDX: &str = "idx";
pub(crate) const BATCH: &str = "batch";
pub(crate) const COUNT: &str = "n";
pub(crate) const IDS: &str = "ids";
/// On `EVENTS`: the number of events in the latest batch (batch `n`).
pub(crate) const LAST_LEN: &str = "last_len";
/// On `EVENTS`: the dispatch mark, the batch and index of the last dispatched event.
pub(crate) const DISP_BATCH: &str = "disp_batch";
pub(crate) const DISP_IDX: &str = "disp_idx";
/// The sparse index attributes.
pub(crate) const GSI1PK: &str = "gsi1pk";
pub(crate) const GSI1SK: &str = "gsi1sk";

pub(crate) const PROJECT_SK: &str = "PROJECT";
/// Quota counters (`n`): a tenant's projects (in `T#{tenant}`), a project's instances (in
/// `P#{pid}`). Neither starts with the prefix of the records it counts.
pub(crate) const PROJECT_COUNTER_SK: &str = "PROJECTS";
pub(crate) const INSTANCE_COUNTER_SK: &str = "INSTANCES";
pub(crate) const HEAD_SK: &str = "HEAD";
pub(crate) const LOG_SK: &str = "LOG";
/// The number of event batches written (`n`).
pub(crate) const EVENT_COUNTER_SK: &str = "EVENTS";
pub(crate) const INSTANCE_PREFIX: &str = "I#";
pub(crate) const TENANT_PROJECT_PREFIX: &str = "P#";
pub(crate) const ENTRY_PREFIX: &str = "E#";
pub(crate) const ITEM_PREFIX: &str = "ITEM#";
pub(crate) const PRODUCT_PREFIX: &str = "PROD#";
pub(crate) const EVENT_BATCH_PREFIX: &str = "EVLOG#";
/// Sorts after every `PROD#...` key (`$` follows `#`): the end of the state range
/// `HEAD ..= PROD$`, which holds HEAD, ITEM#*, LOG and PROD#* only. Other record types of
/// an instance partition must sort outside it (`load_state` reads the whole range).
pub(crate) const STATE_RANGE_END: &str = "PROD$";

/// Partitions of the sparse outbox index (instances with undispatched events): every
/// event write touches it, like every append touches the backlog.
pub const OUTBOX_SHARDS: u32 = 8;
/// Partitions of the sparse index of deliveries that are not final, by due time: every
/// attempt moves an entry.
pub const DUE_SHARDS: u32 = 8;

/// Partitions of the sparse backlog index: spreads the index's writes (every append
/// touches it) over several partitions.
pub const BACKLOG_SHARDS: u32 = 8;

/// The partition of one project (its record, instances and subscriptions): project ids
/// are scoped by tenant.
pub(crate) fn project_pk(key: &ProjectKey) -> String {
    format!("P#{}", key.storage_key())
}

pub(crate) fn tenant_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}")
}

pub(crate) fn tenant_project_sk(id: &ProjectId) -> String {
    format!("{TENANT_PROJECT_PREFIX}{id}")
}

pub(crate) fn instance_sk(id: &InstanceId) -> String {
    format!("{INSTANCE_PREFIX}{id}")
}

/// The partition of one instance's log, state and events.
pub(crate) fn instance_pk(key: &InstanceKey) -> String {
    format!("I#{}", key.storage_key())
}

/// The inverse of [`instance_pk`].
pub(crate) fn parse_instance_pk(pk: &str) -> Option<InstanceKey> {
    InstanceKey::from_storage_key(pk.strip_prefix("I#")?)
}

pub(crate) fn entry_sk(seq: u64) -> String {
    format!("{ENTRY_PREFIX}{seq:020}")
}

pub(crate) fn dedupe_sk(transaction_id: &str) -> String {
    format!("T#{transaction_id}")
}

/// Sequences per log block: a segment (an item of consecutive entries) never spans two
/// blocks, and a block's segments live in one shard of the log (see `log.rs`).
pub(crate) const LOG_BLOCK: u64 = 256;
/// Partition keys the log's segments rotate over, block by block.
pub(crate) const LOG_SHARDS: u64 = 8;
/// Partition keys the dedupe markers spread over (FNV-1a of the transaction id).
pub(crate) const MARKER_SHARDS: u32 = 16;

/// The block of a sequence (sequences start at 1).
pub(crate) fn log_block(seq: u64) -> u64 {
    seq.saturating_sub(1) / LOG_BLOCK
}

/// The last sequence of the block of `seq`.
pub(crate) fn log_block_end(seq: u64) -> u64 {
    (log_block(seq) + 1) * LOG_BLOCK
}

/// The partition of the segment holding `seq`: `{instance pk}#L{block mod LOG_SHARDS}`.
/// Instance ids never hold `#`, so no instance's partition key has this form.
pub(crate) fn segment_pk(instance_pk: &str, seq: u64) -> String {
    format!("{instance_pk}#L{}", log_block(seq) % LOG_SHARDS)
}

/// The partition of a transaction id's dedupe marker: `{instance pk}#T{shard}`.
pub(crate) fn marker_pk(instance_pk: &str, transaction_id: &str) -> String {
    format!("{instance_pk}#T{}", fnv1a(transaction_id) % MARKER_SHARDS)
}

/// The partition of a queued append (see `log/inbox.rs`): `{instance pk}#Q{shard}`, the
/// shard by FNV-1a of the request's id.
pub(crate) fn inbox_pk(instance_pk: &str, request: &str, shards: u32) -> String {
    inbox_shard_pk(instance_pk, fnv1a(request) % shards)
}

pub(crate) fn inbox_shard_pk(instance_pk: &str, shard: u32) -> String {
    format!("{instance_pk}#Q{shard}")
}

/// The commit record of a leased append (see `log.rs`): its lease's writes are committed.
pub(crate) const APPEND_PREFIX: &str = "APPEND#";

pub(crate) fn append_sk(lease: &str) -> String {
    format!("{APPEND_PREFIX}{lease}")
}

pub(crate) fn item_sk(id: &str) -> String {
    format!("{ITEM_PREFIX}{id}")
}

pub(crate) fn product_sk(id: &str) -> String {
    format!("{PRODUCT_PREFIX}{id}")
}

pub(crate) fn event_sk(id: &str) -> String {
    format!("EVENT#{id}")
}

pub(crate) fn event_batch_sk(batch: u64) -> String {
    format!("{EVENT_BATCH_PREFIX}{batch:020}")
}

/// The backlog index partition of an instance (FNV-1a of its partition key).
pub(crate) fn backlog_pk(instance_pk: &str) -> String {
    backlog_shard_pk(backlog_shard(instance_pk))
}

pub(crate) fn backlog_shard_pk(shard: u32) -> String {
    format!("BACKLOG#{shard}")
}

fn backlog_shard(instance_pk: &str) -> u32 {
    fnv1a(instance_pk) % BACKLOG_SHARDS
}

/// FNV-1a (32 bits): a stable hash for spreading index entries over shards.
fn fnv1a(s: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The outbox index partition of an instance: its `EVENTS` item carries
/// `gsi1pk = OUTBOX#{shard}`, `gsi1sk = I#{pid}/{iid}` while it has undispatched events.
pub(crate) fn outbox_pk(instance_pk: &str) -> String {
    outbox_shard_pk(fnv1a(instance_pk) % OUTBOX_SHARDS)
}

pub(crate) fn outbox_shard_pk(shard: u32) -> String {
    format!("OUTBOX#{shard}")
}

// ---------------------------------------------------------------- subscriptions

/// The scope of a subscription inside its project's partition: `P` for project level,
/// `I#{iid}` for one instance.
pub(crate) fn subscription_scope(instance: Option<&InstanceId>) -> String {
    match instance {
        None => "P".to_owned(),
        Some(i) => format!("I#{i}"),
    }
}

/// The subscription record (`record`, `sub_scope`, `ord`).
pub(crate) fn subscription_sk(id: &str) -> String {
    format!("SUB#{id}")
}

/// A scope's counter: `n` (subscriptions now), `next_ord` (ordinals handed out).
pub(crate) fn subscription_counter_sk(scope: &str) -> String {
    format!("SUBN#{scope}")
}

/// A scope's listing entry (`sid`), in creation order.
pub(crate) fn subscription_listing_sk(scope: &str, ord: u64) -> String {
    format!("{}{ord:020}", subscription_listing_prefix(scope))
}

pub(crate) fn subscription_listing_prefix(scope: &str) -> String {
    format!("SUBL#{scope}/")
}

// ---------------------------------------------------------------- deliveries

/// The delivery item's partition (its sort key is [`DELIVERY_SK`]).
pub(crate) fn delivery_pk(webhook_id: &str) -> String {
    format!("D#{webhook_id}")
}

pub(crate) const DELIVERY_SK: &str = "DELIVERY";

/// The partition of one subscription's delivery listing.
pub(crate) fn delivery_listing_pk(project: &ProjectKey, subscription: &SubscriptionId) -> String {
    format!("DL#{}/{subscription}", project.storage_key())
}

/// A listing entry: creation time, position in the creating call, webhook id; listed in
/// descending order (newest first).
pub(crate) fn delivery_listing_sk(created_ms: i64, position: usize, webhook_id: &str) -> String {
    format!("{}#{position:05}#{webhook_id}", millis_key(created_ms))
}

/// The due index partition of a delivery (`DUE#{shard}`).
pub(crate) fn due_pk(webhook_id: &str) -> String {
    due_shard_pk(fnv1a(webhook_id) % DUE_SHARDS)
}

pub(crate) fn due_shard_pk(shard: u32) -> String {
    format!("DUE#{shard}")
}

/// The due index sort key: due time, then webhook id. `due_sk(t, id) < millis_key(b)`
/// exactly when `t < b`.
pub(crate) fn due_sk(due_ms: i64, webhook_id: &str) -> String {
    format!("{}#{webhook_id}", millis_key(due_ms))
}

/// Milliseconds as a fixed-width sortable key (times before 1970 count as 0).
pub(crate) fn millis_key(ms: i64) -> String {
    format!("{:015}", ms.max(0))
}

// ---------------------------------------------------------------- rate limit

/// The partition of a tenant's request counters.
pub(crate) fn rate_pk(tenant: &TenantId) -> String {
    format!("RL#{tenant}")
}

/// One window's counter: the window's width (so a changed width never reuses a count)
/// and its index since the epoch.
pub(crate) fn rate_sk(width_ms: u64, index: u64) -> String {
    format!("W#{width_ms}/{index:020}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort() {
        let key = InstanceKey::new(
            TenantId::from_claim("t/1").expect("tenant"),
            ProjectId::parse("p-1").expect("id"),
            InstanceId::parse("i.2~x").expect("id"),
        );
        assert_eq!(instance_pk(&key), "I#t~2F1/p-1/i.2~x");
        assert_eq!(parse_instance_pk(&instance_pk(&key)), Some(key));
        assert_eq!(parse_instance_pk("I#nope"), None);
        assert!(entry_sk(9) < entry_sk(10));
        assert_eq!(entry_sk(u64::MAX).len(), 22);
        // The state range holds HEAD, items, LOG and products, nothing else.
        let inside = ["HEAD", "ITEM#a", "LOG", "PROD#~~~", "PROD#zz"];
        let outside = [
            "APPEND#a_01J0000000000000000000000",
            "E#00000000000000000001",
            "EVENT#x",
            "EVLOG#1",
            "T#t",
            "T#a#1",
        ];
        for k in inside {
            assert!((HEAD_SK..=STATE_RANGE_END).contains(&k), "{k}");
        }
        for k in outside {
            assert!(!(HEAD_SK..=STATE_RANGE_END).contains(&k), "{k}");
        }
        assert!(backlog_shard("I#a/b") < BACKLOG_SHARDS);
        // Same shard function for existing backlog entries (the hash did not change).
        assert_eq!(backlog_shard("I#a/b"), fnv1a("I#a/b") % BACKLOG_SHARDS);
        assert!(due_sk(5, "wh_z") < millis_key(6));
        assert!(due_sk(6, "wh_a") > millis_key(6));
        assert!(due_sk(999, "wh_a") < due_sk(1000, "wh_a"));
        assert!(delivery_listing_sk(7, 0, "wh_b") < delivery_listing_sk(7, 1, "wh_a"));
        assert!(delivery_listing_sk(7, 99, "wh_b") < delivery_listing_sk(8, 0, "wh_a"));
        assert!(subscription_listing_sk("P", 9) < subscription_listing_sk("P", 10));
        let p = subscription_listing_prefix("P");
        assert!(subscription_listing_sk("P", 1).starts_with(&p));
        assert!(!subscription_listing_sk("I#x", 1).starts_with(&p));
        assert!(
            !subscription_listing_sk("I#ab", 1).starts_with(&subscription_listing_prefix("I#a"))
        );
    }
}
