//! PriceMatchStore: the rule set of each instance as one JSON array with a version, replaced
//! by a single conditional statement.

use pricing_core::ids::InstanceKey;
use pricing_core::ports::{MatchSet, PriceMatchStore, StoreError, StoreResult};
use pricing_core::pricing::PriceMatch;
use rusqlite::{OptionalExtension, params};

use crate::EmbeddedStore;
use crate::db::{to_i64, to_u64};

impl PriceMatchStore for EmbeddedStore {
    async fn get_matches(&self, key: &InstanceKey) -> StoreResult<MatchSet> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("get_matches", move |conn| {
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, record FROM price_matches
                     WHERE project_id = ?1 AND instance_id = ?2",
                )?
                .query_row(params![project, instance], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            match row {
                None => Ok(MatchSet::default()),
                Some((version, record)) => Ok(MatchSet {
                    rules: serde_json::from_str::<Vec<PriceMatch>>(&record)?,
                    version: to_u64(version, "match set version")?,
                }),
            }
        })
        .await
    }

    async fn put_matches(
        &self,
        key: &InstanceKey,
        rules: &[PriceMatch],
        expected_version: u64,
    ) -> StoreResult<()> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let record = serde_json::to_string(rules)
            .map_err(|e| StoreError::Failed(format!("put_matches: encoding the rules: {e}")))?;
        self.on_writer("put_matches", move |conn| {
            let expected = to_i64(expected_version, "match set version")?;
            let next = to_i64(expected_version.saturating_add(1), "match set version")?;
            // One statement each way, so the check and the write are one atomic step.
            let changed = if expected == 0 {
                conn.prepare_cached(
                    "INSERT INTO price_matches (project_id, instance_id, version, record)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (project_id, instance_id) DO NOTHING",
                )?
                .execute(params![project, instance, next, record])?
            } else {
                conn.prepare_cached(
                    "UPDATE price_matches SET version = ?3, record = ?4
                     WHERE project_id = ?1 AND instance_id = ?2 AND version = ?5",
                )?
                .execute(params![project, instance, next, record, expected])?
            };
            if changed == 1 {
                return Ok(());
            }
            let stored: Option<i64> = conn
                .prepare_cached(
                    "SELECT version FROM price_matches WHERE project_id = ?1 AND instance_id = ?2",
                )?
                .query_row(params![project, instance], |r| r.get(0))
                .optional()?;
            Err(StoreError::Conflict(format!(
                "price matches of {project}/{instance} are at version {}, not {expected_version}",
                stored.unwrap_or(0)
            ))
            .into())
        })
        .await
    }
}
