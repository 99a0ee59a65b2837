//! Embedded adapters: every port of `pricing_core::ports` on one SQLite file (rusqlite,
//! bundled SQLite), plus the data-dir helpers for key material ([`keys`]).
//!
//! [`EmbeddedStore`] is cheap to clone (an `Arc` inside). Writes go through one writer
//! connection behind a mutex (SQLite allows one writer at a time anyway); reads go through
//! a few read-only connections, which WAL mode lets run beside the writer. SQLite work runs
//! off the async workers, with two exceptions on the request path:
//! - the small writes of requests (entry appends, queue sends) are group-commit jobs
//!   (`group.rs`): a queue of pending jobs drained into one transaction, each job in a
//!   savepoint of its own, committed once, each job answered only after that commit; the
//!   caller that finds the writer free runs the group itself, else the group writer thread
//!   does once the writer is free;
//! - point reads by key (a project, an instance) run on the calling thread when the writer
//!   or a reader is free (microseconds, less than a hand-off).
//!
//! Everything else (the processor's reads and commits, queue receives, listings) runs on
//! tokio's blocking pool (`spawn_blocking`).
//!
//! Ports implemented: ProjectStore, InstanceStore, EntryLog, StateStore, EventStore (with
//! the outbox), WorkQueue, Backlog, PriceStore, PriceMatchStore, ActiveInstances,
//! SubscriptionStore, DeliveryStore; RateLimit in memory ([`TokenBuckets`]). Beyond the
//! ports: [`EmbeddedStore::wait_for_work`] (a worker's idle wait that wakes on `send`),
//! [`EmbeddedStore::release_in_flight`],
//! [`EmbeddedStore::webhook_queue`] (the webhooks lane's [`WebhookQueue`], with the same
//! two), [`EmbeddedStore::path`].
//!
//! Queues: one table, two lanes. The store as a `WorkQueue` receives instance work
//! (ProcessInstance, Recalculate); its [`WebhookQueue`] receives webhooks (Deliver,
//! Trigger). `send` on either routes by `Message::lane()`.
//!
//! Schema (version 11, `PRAGMA user_version`; see `db.rs`, which upgrades older files in
//! place): every record is JSON text in a `record` column beside the key columns queries
//! need: `projects` (by tenant), `instances`, `entries` (one row per log entry, unique
//! (instance, transactionId)), `log_heads` (last sequence per instance), `state_headers`
//! (with `applied_seq` for the conditional commit), `state_items`, `state_products`,
//! `events` (insertion order), `queue` (group, dedupe key, visibility, receipt, receive
//! count); since version 2 `price_calculations` (id and sequence of every stored
//! calculation), `price_latest` (the latest calculation whole, one JSON snapshot),
//! `price_history` (one row per calculated price) and `price_matches` (the versioned rule
//! set of an instance); since version 3 `event_heads` (last event and dispatch mark per
//! instance), `subscriptions`, `deliveries`, and the queue's `lane` and `delayed` columns;
//! since version 9 the item records of `state_items` are in a compact binary form
//! (`item_record.rs`; JSON records of older files are rewritten by that step, and read);
//! since version 10 `price_latest` holds the latest calculation's head and its prices are
//! in `price_latest_chunks`, 1,000 to a row (a page of them reads only its rows; older
//! records, with their prices inline, are read as before and replaced by the next
//! calculation).
//!
//! Durability: WAL with `synchronous=NORMAL` by default ([`Durability::ProcessCrash`]):
//! every commit is written to the WAL file before the call returns, so an acknowledged
//! write survives the process being killed (`kill -9`, OOM, panic), which is what the
//! service needs; only an OS crash or power cut can lose the last commits (never corrupt
//! the file). [`Durability::PowerLoss`] (`synchronous=FULL`) survives those too, at one
//! fsync per write transaction.

mod backlog;
mod db;
mod deliveries;
mod events;
mod group;
mod instances;
mod item_decode;
mod item_record;
pub mod keys;
mod limiter;
mod log;
mod matches;
mod prices;
mod projects;
mod queue;
mod records;
mod retention;
mod schedule;
mod state;
mod subscriptions;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pricing_core::ports::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::Notify;

pub use db::Durability;
pub use keys::{
    load_or_create_private_file, load_or_create_signing_keys, read_private_file, write_private_file,
};
pub use limiter::TokenBuckets;
pub use queue::WebhookQueue;
pub use retention::PruneReport;

use db::{DbError, DbResult};

/// Read-only connections opened beside the writer of a database file.
const READERS: usize = 3;

/// Errors of opening a store or of the data-dir helpers.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("database {path}: {source}")]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid: {detail}")]
    Invalid { path: PathBuf, detail: String },
    #[error("{path} does not exist")]
    Missing { path: PathBuf },
    #[error(transparent)]
    Key(#[from] pricing_core::jws::KeyError),
}

/// The embedded implementation of every port (SQLite).
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    writer: Mutex<Connection>,
    /// The queue of the group writer, which runs the small writes of requests (appends,
    /// queue sends) in shared transactions on `writer` (see [`group`]).
    group: group::GroupQueue,
    /// Empty for an in-memory store: reads then use the writer.
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    /// Dedupe keys of queued messages never received, as committed (see
    /// `queue::PendingKeys`): a `send` whose message would merge into one of them writes
    /// nothing. Changed only while holding `writer`.
    pending: queue::PendingKeys,
    /// The project and instance records read by every entries request (`records.rs`).
    records: records::Records,
    /// Woken by `send`, `ack` and `retry_later` on the instance-work lane (see
    /// `wait_for_work`).
    work: Notify,
    /// The same for the webhooks lane (see `WebhookQueue::wait_for_work`).
    webhooks: Notify,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens (creating it if needed) the database file at `path` with the default
    /// durability ([`Durability::ProcessCrash`]). Missing parent directories are created.
    pub fn open(path: &Path) -> Result<Self, EmbeddedError> {
        Self::open_with(path, Durability::default())
    }

    /// Opens the database file at `path` with the given durability.
    pub fn open_with(path: &Path, durability: Durability) -> Result<Self, EmbeddedError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| EmbeddedError::Io {
                op: "create the directory",
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let db_err = |source| EmbeddedError::Database {
            path: path.to_path_buf(),
            source,
        };
        let mut writer = db::open_writer(path, durability)?;
        let found = db::migrate(&mut writer, path)?;
        if found < db::SCHEMA_VERSION {
            tracing::info!(path = %path.display(), from = found, to = db::SCHEMA_VERSION, "database schema created or migrated");
        }
        let readers = (0..READERS)
            .map(|_| db::open_reader(path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(db_err)?;
        let store =
            Self::from_parts(writer, readers, Some(path.to_path_buf())).map_err(|source| {
                EmbeddedError::Io {
                    op: "start the writer thread for",
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        db::spawn_checkpointer(path, Arc::downgrade(&store.inner))?;
        Ok(store)
    }

    /// Opens the existing database file at `path` to read it and nothing else (`simulate
    /// log`): no schema step, no checkpoint; a file of another schema version than this
    /// build's is refused, and so is every write. `unchanging`: the caller keeps every
    /// writer away while the store lives (the standalone's data directory lock); the file
    /// is then read as immutable when no process has it open, and nothing is created
    /// beside it.
    pub fn open_read_only(path: &Path, unchanging: bool) -> Result<Self, EmbeddedError> {
        if !path.is_file() {
            return Err(EmbeddedError::Missing {
                path: path.to_path_buf(),
            });
        }
        let db_err = |source| EmbeddedError::Database {
            path: path.to_path_buf(),
            source,
        };
        let immutable = db::immutable(path, unchanging);
        let first = db::open_read_only(path, immutable).map_err(db_err)?;
        db::require_current(&first, path)?;
        let readers = (0..READERS)
            .map(|_| db::open_read_only(path, immutable).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(db_err)?;
        Self::from_parts(first, readers, Some(path.to_path_buf())).map_err(|source| {
            EmbeddedError::Io {
                op: "start the writer thread for",
                path: path.to_path_buf(),
                source,
            }
        })
    }

    /// A private in-memory database, for tests: same schema and semantics, nothing on disk.
    pub fn open_in_memory() -> Result<Self, EmbeddedError> {
        let path = Path::new(":memory:");
        let mut writer = db::open_memory().map_err(|source| EmbeddedError::Database {
            path: path.to_path_buf(),
            source,
        })?;
        db::migrate(&mut writer, path)?;
        Self::from_parts(writer, Vec::new(), None).map_err(|source| EmbeddedError::Io {
            op: "start the writer thread for",
            path: path.to_path_buf(),
            source,
        })
    }

    fn from_parts(
        writer: Connection,
        readers: Vec<Mutex<Connection>>,
        path: Option<PathBuf>,
    ) -> std::io::Result<Self> {
        let store = EmbeddedStore {
            inner: Arc::new(Inner {
                writer: Mutex::new(writer),
                group: group::GroupQueue::new(),
                pending: queue::PendingKeys::default(),
                records: records::Records::default(),
                readers,
                next_reader: AtomicUsize::new(0),
                work: Notify::new(),
                webhooks: Notify::new(),
                path,
            }),
        };
        group::GroupQueue::start(Arc::downgrade(&store.inner))?;
        Ok(store)
    }

    /// The database file (`None` for an in-memory store).
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Runs `f` on the writer connection on the blocking pool.
    async fn on_writer<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> DbResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        run_blocking(op, move || f(&mut lock(&inner.writer))).await
    }

    /// Runs `f` in the next group transaction on the writer (see [`group`]): for the small
    /// writes of requests. `f` must not open a transaction; it answers once the transaction
    /// holding it committed, and its error (or panic) rolls back its own writes only.
    async fn in_group<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        group::run(&self.inner, op, f, None).await
    }

    /// Runs `f` on a reader connection (the writer for an in-memory store).
    async fn on_reader<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> DbResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        run_blocking(op, move || f(&mut inner.reader())).await
    }

    /// Runs a point read (one small row by its key) right here, on the calling task's
    /// thread, on the writer connection if it is free, else on a free reader: it takes
    /// microseconds, less than a hand-off to the blocking pool and back. The writer comes
    /// first: its page cache is current, while a reader discards its cache whenever the
    /// database changed since its last read (after every commit, under load). When no
    /// connection is free the read goes to the blocking pool like any read.
    async fn on_reader_inline<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> DbResult<T> + Send + 'static,
    {
        match self.inner.try_on_free_reader(f) {
            Ok(result) => result.map_err(|e| e.into_store(op)),
            Err(f) => self.on_reader(op, f).await,
        }
    }
}

impl Inner {
    /// Runs `f` now on the writer connection if it is free (outside any transaction: it
    /// reads what is committed), else on a free reader; hands `f` back if none is free.
    fn try_on_free_reader<T, F>(&self, f: F) -> Result<DbResult<T>, F>
    where
        F: FnOnce(&mut Connection) -> DbResult<T>,
    {
        let free = self.writer.try_lock().ok().or_else(|| self.free_reader());
        match free {
            Some(mut conn) => Ok(f(&mut conn)),
            None => Err(f),
        }
    }

    /// A reader no one is using (the writer for an in-memory store), without waiting.
    fn free_reader(&self) -> Option<MutexGuard<'_, Connection>> {
        if self.readers.is_empty() {
            return self.writer.try_lock().ok();
        }
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let n = self.readers.len();
        (0..n).find_map(|i| self.readers[(start + i) % n].try_lock().ok())
    }

    /// A free reader if there is one, else waits on the next one in turn.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        if self.readers.is_empty() {
            return lock(&self.writer);
        }
        if let Some(free) = self.free_reader() {
            return free;
        }
        let n = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        lock(&self.readers[n])
    }
}

/// A poisoned connection mutex means a panic mid-call; any open transaction was rolled
/// back when it unwound, so the connection is still usable.
fn lock(m: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn run_blocking<T, F>(op: &'static str, f: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> DbResult<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e: DbError| e.into_store(op)),
        Err(join) => Err(StoreError::Failed(format!("{op}: {join}"))),
    }
}

#[cfg(test)]
mod tests;
