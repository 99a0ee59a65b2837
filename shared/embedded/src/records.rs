//! In-memory copies of the project and instance records, which every entries request
//! reads (who owns the instance) and almost nothing writes.
//!
//! Exact, not a TTL cache: this process is the only writer of its database (one
//! `standalone serve` per data directory, as `queue::PendingKeys` assumes too), and every
//! write of a project or instance record (`create_project_within`, `create_instance_within`,
//! `put_instance`) calls [`Records::changed`] once it committed, before it answers. A read
//! that missed the cache keeps what it read only if no such write was noted since it began
//! (the generation): a record read from before a write is never kept after it. Only found
//! records are kept (an unknown id is read from the database every time).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pricing_core::model::{Instance, Project};

/// Records kept at most per kind; past that the map starts over (a miss costs one read).
const MAX_RECORDS: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct Records(Mutex<Maps>);

#[derive(Debug, Default)]
struct Maps {
    /// Bumped by every write of a record (see [`Records::changed`]).
    generation: u64,
    /// By the project's storage key.
    projects: HashMap<String, Project>,
    /// By the project's storage key, then the instance id.
    instances: HashMap<String, HashMap<String, Instance>>,
    instance_count: usize,
}

/// What a read that missed saw of the cache when it began: hand it back to keep the
/// record read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Generation(u64);

impl Records {
    fn maps(&self) -> MutexGuard<'_, Maps> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn project(&self, key: &str) -> Result<Project, Generation> {
        let maps = self.maps();
        maps.projects
            .get(key)
            .cloned()
            .ok_or(Generation(maps.generation))
    }

    pub(crate) fn instance(&self, project: &str, id: &str) -> Result<Instance, Generation> {
        let maps = self.maps();
        maps.instances
            .get(project)
            .and_then(|m| m.get(id))
            .cloned()
            .ok_or(Generation(maps.generation))
    }

    /// Keeps a project read from the database, unless a record changed since `seen`.
    pub(crate) fn keep_project(&self, seen: Generation, key: String, project: &Project) {
        let mut maps = self.maps();
        if maps.generation != seen.0 {
            return;
        }
        if maps.projects.len() >= MAX_RECORDS {
            maps.projects.clear();
        }
        maps.projects.insert(key, project.clone());
    }

    /// Keeps an instance read from the database, unless a record changed since `seen`.
    pub(crate) fn keep_instance(
        &self,
        seen: Generation,
        project: String,
        id: String,
        instance: &Instance,
    ) {
        let mut maps = self.maps();
        if maps.generation != seen.0 {
            return;
        }
        if maps.instance_count >= MAX_RECORDS {
            maps.instances.clear();
            maps.instance_count = 0;
        }
        let added = maps
            .instances
            .entry(project)
            .or_default()
            .insert(id, instance.clone())
            .is_none();
        maps.instance_count += usize::from(added);
    }

    /// A project or instance record was written (or a write of one failed after it may
    /// have committed): forgets every kept record and refuses what reads in progress
    /// read. Called after the write's commit, before the write answers.
    pub(crate) fn changed(&self) {
        let mut maps = self.maps();
        maps.generation = maps.generation.wrapping_add(1);
        maps.projects.clear();
        maps.instances.clear();
        maps.instance_count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pricing_core::ids::{InstanceId, ProjectId, TenantId};
    use pricing_core::time::Timestamp;

    fn instance(name: &str) -> Instance {
        Instance {
            tenant: TenantId::from_claim("t").unwrap(),
            project_id: ProjectId::parse("p").unwrap(),
            instance_id: InstanceId::parse("i").unwrap(),
            name: name.into(),
            active: true,
            time_zone: None,
            deactivation_date: None,
            created_at: Timestamp::now(),
            updated_at: Timestamp::now(),
            deactivation_announced: None,
        }
    }

    #[test]
    fn a_read_from_before_a_write_is_not_kept() {
        let records = Records::default();
        let seen = records.instance("t/p", "i").unwrap_err();
        records.keep_instance(seen, "t/p".into(), "i".into(), &instance("old"));
        assert_eq!(records.instance("t/p", "i").unwrap().name, "old");
        // A read misses, a write commits and is noted, then the read's record comes back.
        records.changed();
        let seen = records.instance("t/p", "i").unwrap_err();
        records.changed();
        records.keep_instance(seen, "t/p".into(), "i".into(), &instance("old"));
        assert!(
            records.instance("t/p", "i").is_err(),
            "a stale read was kept"
        );
        let seen = records.instance("t/p", "i").unwrap_err();
        records.keep_instance(seen, "t/p".into(), "i".into(), &instance("new"));
        assert_eq!(records.instance("t/p", "i").unwrap().name, "new");
    }

    /// Through the store: a record read is kept, and every write of a record is seen by
    /// the next read (the instance's update, a project created after a miss).
    #[tokio::test]
    async fn the_store_reads_each_write_of_a_record() {
        use pricing_contract::fixtures::{Run, header, project};
        use pricing_core::ports::{InstanceStore, ProjectStore};
        use serde_json::json;

        let dir = tempfile::tempdir().unwrap();
        let store = crate::EmbeddedStore::open(&dir.path().join("pricing.db")).unwrap();
        let run = Run::new("records");
        let key = run.key("p", "i");
        let pkey = key.project();
        assert_eq!(store.get_project(&pkey).await.unwrap(), None);
        let owner = project(&key.project_id, &key.tenant, "P");
        store.create_project(&owner).await.unwrap();
        assert_eq!(store.get_project(&pkey).await.unwrap(), Some(owner.clone()));
        assert_eq!(store.get_project(&pkey).await.unwrap(), Some(owner));
        assert_eq!(store.get_instance(&key).await.unwrap(), None);
        let mut record = pricing_contract::fixtures::instance(&key, "before");
        store
            .create_instance(&record, &header(0, json!({})))
            .await
            .unwrap();
        assert_eq!(
            store.get_instance(&key).await.unwrap().unwrap().name,
            "before"
        );
        assert_eq!(
            store.get_instance(&key).await.unwrap().unwrap().name,
            "before"
        );
        record.name = "after".into();
        let read_at = record.updated_at;
        record.updated_at = Timestamp::now().at_least_after(read_at);
        store.put_instance(&record, read_at).await.unwrap();
        assert_eq!(store.get_instance(&key).await.unwrap(), Some(record));
    }
}
