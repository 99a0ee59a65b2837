//! Connections, pragmas, the schema and the mapping of SQLite errors onto `StoreError`.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pricing_core::ids::{InstanceId, InstanceKey, ProjectId, ProjectKey, TenantId};
use pricing_core::ports::{StoreError, StoreResult};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::EmbeddedError;

/// How long a connection waits for a lock held by another connection before giving up
/// with `SQLITE_BUSY` (mapped to `StoreError::Unavailable`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;
/// WAL pages (4 KiB) after which the writer checkpoints by itself.
const WRITER_CHECKPOINT_PAGES: i64 = 16_384;
/// How often the background connection copies the WAL into the database file.
///
/// Short, so that each checkpoint has little to copy and to fsync. Under a steady stream
/// of commits the WAL is rarely fully copied at the moment a write begins, which is when
/// SQLite starts it over, so it grows to the writer's backstop (`WRITER_CHECKPOINT_PAGES`)
/// and the writer checkpoints there itself, while every request waits for it. At 500 ms
/// the background had fallen up to 40 MB behind by then, and that checkpoint's fsync held
/// all requests for 15 to 45 ms about once a second (one-entry POSTs at 1,000/s: p99 27 ms);
/// at 50 ms the backstop finds the WAL copied and synced, and costs nothing (p99 3 ms;
/// docs/performance.md, "The checkpoint interval"). An idle checkpoint reads the WAL index
/// and stops: nothing to copy, no fsync.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);
/// The schema this code writes (`PRAGMA user_version`).
pub(crate) const SCHEMA_VERSION: i64 = 11;

/// What a write acknowledged by the store survives.
///
/// The store always runs in WAL mode. `ProcessCrash` (the default) uses
/// `synchronous=NORMAL`: a commit is in the WAL file, in the operating system's page cache,
/// before the call returns, so it survives the process being killed (`kill -9`, a panic,
/// an OOM kill); the WAL is fsynced at checkpoints. A power loss or kernel crash may lose
/// the last commits (never corrupt the database). `PowerLoss` uses `synchronous=FULL`:
/// every commit fsyncs the WAL, at a cost of one fsync per write transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    #[default]
    ProcessCrash,
    PowerLoss,
}

impl Durability {
    fn synchronous(self) -> &'static str {
        match self {
            Durability::ProcessCrash => "NORMAL",
            Durability::PowerLoss => "FULL",
        }
    }
}

/// Errors inside a blocking database closure; turned into `StoreError` at the boundary.
#[derive(Debug)]
pub(crate) enum DbError {
    Sqlite(rusqlite::Error),
    Json(serde_json::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

impl From<serde_json::Error> for DbError {
    fn from(e: serde_json::Error) -> Self {
        DbError::Json(e)
    }
}

impl From<StoreError> for DbError {
    fn from(e: StoreError) -> Self {
        DbError::Store(e)
    }
}

pub(crate) type DbResult<T> = Result<T, DbError>;

impl DbError {
    /// Maps onto the port's error, naming the operation that failed.
    pub(crate) fn into_store(self, op: &str) -> StoreError {
        match self {
            DbError::Sqlite(e) if is_busy(&e) => StoreError::Unavailable(format!("{op}: {e}")),
            // A full disk: the write was rolled back whole; it succeeds once space returns
            // (the API answers 503 with Retry-After, the processor retries).
            DbError::Sqlite(e) if is_disk_full(&e) => {
                tracing::error!(op, error = %e, "the disk is full");
                StoreError::Unavailable(format!("{op}: the disk is full: {e}"))
            }
            DbError::Sqlite(e) => {
                tracing::error!(op, error = %e, "sqlite failure");
                StoreError::Failed(format!("{op}: {e}"))
            }
            DbError::Json(e) => {
                tracing::error!(op, error = %e, "stored record does not decode");
                StoreError::Failed(format!("{op}: stored record does not decode: {e}"))
            }
            DbError::Store(e) => e,
        }
    }
}

pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// SQLITE_FULL: no space left for the database, its journal or WAL.
pub(crate) fn is_disk_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(ErrorCode::DiskFull)
}

/// A row with the key already exists (a PRIMARY KEY or UNIQUE constraint): the one
/// constraint failure that means "taken". Any other (a NOT NULL a trigger hit, a CHECK) is
/// a fault of ours and stays an error: it was answered 409 "already exists" for a freshly
/// generated id.
pub(crate) fn is_duplicate_key(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

/// Opens the writer connection of a database file, sets it up and migrates the schema.
pub(crate) fn open_writer(
    path: &Path,
    durability: Durability,
) -> Result<Connection, EmbeddedError> {
    let sqlite = |source| EmbeddedError::Database {
        path: path.to_path_buf(),
        source,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(sqlite)?;
    refuse_foreign(&conn, path)?;
    configure(&conn, WRITER_CACHE_KIB).map_err(sqlite)?;
    // WAL: readers never block the writer, and a commit is one append to the WAL file.
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(sqlite)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(EmbeddedError::Invalid {
            path: path.to_path_buf(),
            detail: format!("cannot switch to WAL mode (journal mode is {mode})"),
        });
    }
    // Checkpoints run on a background connection (see `spawn_checkpointer`), off the
    // write path; the writer only checkpoints itself past this WAL size, as a backstop.
    conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)
        .map_err(sqlite)?;
    conn.pragma_update(None, "synchronous", durability.synchronous())
        .map_err(sqlite)?;
    Ok(conn)
}

/// A file that is some other program's SQLite database (no schema version of ours, but
/// tables) is refused before anything is written to it (not even the WAL switch). A file
/// that is not SQLite at all fails on this first read ("file is not a database").
fn refuse_foreign(conn: &Connection, path: &Path) -> Result<(), EmbeddedError> {
    let sqlite = |source| EmbeddedError::Database {
        path: path.to_path_buf(),
        source,
    };
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sqlite)?;
    if version != 0 {
        return Ok(());
    }
    let mut stmt = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name LIMIT 5",
        )
        .map_err(sqlite)?;
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(sqlite)?;
    if names.is_empty() {
        return Ok(());
    }
    Err(EmbeddedError::Invalid {
        path: path.to_path_buf(),
        detail: format!(
            "not a pricing database: it has no schema version but holds {} ({}); \
             refusing to change it (move it away or point --data elsewhere)",
            if names.len() == 1 {
                "a table"
            } else {
                "tables"
            },
            names.join(", ")
        ),
    })
}

/// Opens one more (read-only) connection to a database file in WAL mode.
pub(crate) fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    configure(&conn, READER_CACHE_KIB)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

/// Whether the database at `path` may be read as immutable: the caller keeps every writer
/// away while it reads (`unchanging`), and no write-ahead log is beside the file (a
/// process in WAL mode keeps its log while it has the database open; one that takes no
/// lock, an older build, is seen by it). Decided once per store, for all its connections.
pub(crate) fn immutable(path: &Path, unchanging: bool) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    unchanging && !Path::new(&wal).exists()
}

/// A connection that reads the database and never writes to it: opened read-only, no
/// checkpoint when it closes. As `immutable` ([`immutable`]), SQLite reads the file alone:
/// no `-wal` or `-shm` file is made, and a copy in a directory or file the reader may not
/// write reads too. Otherwise it reads through the live log and index of the process that
/// has the database open.
pub(crate) fn open_read_only(path: &Path, immutable: bool) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = if immutable {
        Connection::open_with_flags(format!("file:{}?immutable=1", uri_path(path)), flags)?
    } else {
        Connection::open_with_flags(path, flags)?
    };
    configure(&conn, READER_CACHE_KIB)?;
    conn.pragma_update(None, "query_only", true)?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    Ok(conn)
}

/// `path` as the path of an SQLite URI (`file:...`): the characters a URI gives a meaning
/// (`%`, `?`, `#`) escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// The schema version of the database `conn` reads, refused unless it is exactly this
/// build's: a reader that must change nothing cannot upgrade an older file, and must not
/// misread a newer one.
pub(crate) fn require_current(conn: &Connection, path: &Path) -> Result<(), EmbeddedError> {
    let found = schema_version(conn, path)?;
    match found.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(newer_than_this_build(found, path)),
        // Version 0: a file no `serve` has written a schema into (empty, or another
        // program's database).
        std::cmp::Ordering::Less if found == 0 => Err(EmbeddedError::Invalid {
            path: path.to_path_buf(),
            detail: "not a database of this service (no schema version): is it the \
                     data directory of `standalone serve`?"
                .into(),
        }),
        std::cmp::Ordering::Less => Err(EmbeddedError::Invalid {
            path: path.to_path_buf(),
            detail: format!(
                "schema version {found} is older than this build's {SCHEMA_VERSION}, and this \
                 command changes nothing: `standalone serve` of this build upgrades it (for \
                 good: older builds then refuse it; back the data directory up first)"
            ),
        }),
    }
}

/// The schema version of the database `conn` reads (`PRAGMA user_version`; 0 for a new
/// file).
fn schema_version(conn: &Connection, path: &Path) -> Result<i64, EmbeddedError> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|source| EmbeddedError::Database {
            path: path.to_path_buf(),
            source,
        })
}

fn newer_than_this_build(found: i64, path: &Path) -> EmbeddedError {
    EmbeddedError::Invalid {
        path: path.to_path_buf(),
        detail: format!("schema version {found} is newer than this build's {SCHEMA_VERSION}"),
    }
}

/// Checkpoints the WAL every `CHECKPOINT_EVERY` from a connection of its own (PASSIVE: it
/// never waits for nor blocks the writer and readers), so that appends do not pay for
/// checkpoints. Ends once `alive` can no longer be upgraded (the store was dropped).
pub(crate) fn spawn_checkpointer<T: Send + Sync + 'static>(
    path: &Path,
    alive: std::sync::Weak<T>,
) -> Result<(), EmbeddedError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|c| configure(&c, CHECKPOINTER_CACHE_KIB).map(|()| c))
    .map_err(|source| EmbeddedError::Database {
        path: path.to_path_buf(),
        source,
    })?;
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            loop {
                std::thread::sleep(CHECKPOINT_EVERY);
                if alive.upgrade().is_none() {
                    return;
                }
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::debug!(error = %e, "background checkpoint failed");
                }
            }
        })
        .map_err(|source| EmbeddedError::Io {
            op: "start the checkpoint thread for",
            path: path.to_path_buf(),
            source,
        })?;
    Ok(())
}

/// A private in-memory database (one connection: readers share the writer).
pub(crate) fn open_memory() -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    configure(&conn, MEMORY_CACHE_KIB)?;
    Ok(conn)
}

/// Page cache of the writer, in KiB. Pages it misses come from the OS's file cache. At 32
/// MiB it filled with a 100,000-item instance's pages and held them (its state is written
/// and read whole); 8 MiB changed neither the 10,000-item recalculation nor the one-entry
/// load (docs/performance.md, "Memory of a 100,000-item instance").
const WRITER_CACHE_KIB: i64 = 8 * 1024;
/// Page cache of an in-memory database (tests), which is all cache, in KiB.
const MEMORY_CACHE_KIB: i64 = 32 * 1024;
/// Page cache of each reader, in KiB. A reader's cache fills up to its size with what it
/// read (a large instance's state is read whole): 3 readers at 32 MiB held ~100 MB of the
/// standalone's memory with a 100,000-item instance (8 MiB each until 2026-11-28; 4 MiB
/// took 3 to 8 MB off its peak). Pages it misses come from the OS's file cache
/// (docs/performance.md, "Memory of a 100,000-item instance").
const READER_CACHE_KIB: i64 = 4 * 1024;
/// The checkpointer copies WAL frames into the database; it reads little through its cache.
const CHECKPOINTER_CACHE_KIB: i64 = 2 * 1024;

fn configure(conn: &Connection, cache_kib: i64) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Plans do not depend on bound values. Without this, SQLite reads the value bound to a
    // `LIMIT ?` while planning, so binding it again expires the statement and every run of
    // a cached statement with one (the log's and most pages' reads) was prepared anew: 3 %
    // of the server's CPU under one-entry load (docs/performance.md, "The checkpoint
    // interval"). Our queries have no plan that a bound value could improve.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // Negative: the size in KiB.
    conn.pragma_update(None, "cache_size", -cache_kib)?;
    Ok(())
}

/// Creates or checks the schema. Returns the version found before migrating.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<i64, EmbeddedError> {
    let found = schema_version(conn, path)?;
    if found > SCHEMA_VERSION {
        return Err(newer_than_this_build(found, path));
    }
    create_schema(conn, found).map_err(|source| EmbeddedError::Database {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(found)
}

fn create_schema(conn: &mut Connection, found: i64) -> rusqlite::Result<()> {
    // Each step runs in a transaction of its own and records its version, so an upgrade
    // interrupted half way resumes at the first step not recorded.
    for (version, step) in MIGRATIONS {
        if found < *version {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            match step {
                Step::Sql(batch) => tx.execute_batch(batch)?,
                Step::Code(run) => run(&tx)?,
            }
            tx.pragma_update(None, "user_version", version)?;
            tx.commit()?;
        }
    }
    Ok(())
}

/// One schema step: SQL, or code where SQL cannot say it.
enum Step {
    Sql(&'static str),
    Code(fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>),
}

/// The schema steps in order: version `n` is reached by running every step up to `n`.
const MIGRATIONS: &[(i64, Step)] = &[
    (1, Step::Sql(SCHEMA_V1)),
    (2, Step::Sql(SCHEMA_V2)),
    (3, Step::Sql(SCHEMA_V3)),
    (4, Step::Sql(SCHEMA_V4)),
    (5, Step::Sql(crate::schedule::SCHEMA_V5)),
    (6, Step::Code(scope_projects_by_tenant)),
    (7, Step::Sql(crate::schedule::SCHEMA_V7)),
    (8, Step::Sql(crate::retention::SCHEMA_V8)),
    (9, Step::Code(crate::item_record::rewrite_json_records)),
    (10, Step::Sql(crate::prices::SCHEMA_V10)),
    (11, Step::Sql(crate::schedule::SCHEMA_V11)),
];

/// The tables keyed by `project_id`.
const PROJECT_TABLES: [&str; 16] = [
    "projects",
    "instances",
    "entries",
    "log_heads",
    "state_headers",
    "state_items",
    "state_products",
    "events",
    "event_heads",
    "price_calculations",
    "price_latest",
    "price_history",
    "price_matches",
    "subscriptions",
    "deliveries",
    "schedule_index",
];

/// Version 6: project ids are scoped by tenant. Every `project_id` column holds the
/// project's `ProjectKey::storage_key` (`{tenant}/{project}`); instance, subscription and
/// delivery records carry their `tenant`; queued messages name the tenant of their
/// instance or project (and their group and deduplication keys are rebuilt). Rows of a
/// project without a `projects` row (none are written) are left as they are; queued
/// messages that name no known project are dropped with a warning.
fn scope_projects_by_tenant(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let mut tenants = std::collections::HashMap::new();
    {
        let mut stmt = tx.prepare("SELECT project_id, tenant FROM projects")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            tenants.insert(text(row, 0)?.to_owned(), text(row, 1)?.to_owned());
        }
    }
    tx.execute_batch(
        "CREATE TEMP TABLE v6_keys (old TEXT PRIMARY KEY, new TEXT NOT NULL, tenant TEXT NOT NULL)",
    )?;
    for (project, tenant) in &tenants {
        let Some(key) = TenantId::from_claim(tenant)
            .zip(ProjectId::parse(project.as_str()).ok())
            .map(|(t, p)| ProjectKey::new(t, p))
        else {
            tracing::warn!(
                project,
                tenant,
                "schema v6: a stored project id or tenant is not valid; left unscoped"
            );
            continue;
        };
        tx.execute(
            "INSERT INTO v6_keys (old, new, tenant) VALUES (?1, ?2, ?3)",
            rusqlite::params![project, key.storage_key(), tenant],
        )?;
    }
    for table in PROJECT_TABLES {
        tx.execute_batch(&format!(
            "UPDATE {table} SET project_id = (SELECT new FROM v6_keys WHERE old = {table}.project_id)
             WHERE project_id IN (SELECT old FROM v6_keys)"
        ))?;
    }
    for table in ["instances", "subscriptions", "deliveries"] {
        tx.execute_batch(&format!(
            "UPDATE {table}
             SET record = json_set(record, '$.tenant',
                 (SELECT tenant FROM v6_keys WHERE new = {table}.project_id))
             WHERE project_id IN (SELECT new FROM v6_keys)"
        ))?;
    }
    tx.execute_batch("DROP TABLE v6_keys")?;
    rescope_queue(tx, &tenants)
}

/// Rewrites queued messages in the version 6 form (see [`scope_projects_by_tenant`]).
fn rescope_queue(
    tx: &rusqlite::Transaction<'_>,
    tenants: &std::collections::HashMap<String, String>,
) -> rusqlite::Result<()> {
    let mut queued = Vec::new();
    {
        let mut stmt = tx.prepare("SELECT id, body FROM queue")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            queued.push((row.get::<_, i64>(0)?, text(row, 1)?.to_owned()));
        }
    }
    for (id, body) in queued {
        let Ok(mut message) = serde_json::from_str::<serde_json::Value>(&body) else {
            continue; // Parked as undecodable already; left for inspection.
        };
        let tenant_of = |project: Option<&serde_json::Value>| {
            project
                .and_then(serde_json::Value::as_str)
                .and_then(|p| tenants.get(p))
                .cloned()
        };
        // A message that already names its tenant (written by this version) stays as it is.
        if message["key"].get("tenant").is_some() || message.get("project").is_some() {
            continue;
        }
        let rescoped = match message.get("kind").and_then(serde_json::Value::as_str) {
            Some("processInstance" | "recalculate") => {
                let key = message
                    .get_mut("key")
                    .and_then(serde_json::Value::as_object_mut);
                key.and_then(|key| {
                    let tenant = tenant_of(key.get("projectId"))?;
                    key.insert("tenant".into(), tenant.into());
                    Some(())
                })
            }
            Some("trigger") => message.as_object_mut().and_then(|m| {
                let project = m.remove("projectId")?;
                let tenant = tenant_of(Some(&project))?;
                m.insert(
                    "project".into(),
                    serde_json::json!({"tenant": tenant, "projectId": project}),
                );
                Some(())
            }),
            // Deliver names a webhook id only.
            _ => continue,
        };
        let decoded = rescoped.and_then(|()| {
            serde_json::from_value::<pricing_core::model::Message>(message.clone()).ok()
        });
        match decoded {
            Some(m) => {
                tx.execute(
                    "UPDATE queue SET body = ?2, message_group = ?3, dedupe_key = ?4 WHERE id = ?1",
                    rusqlite::params![id, message.to_string(), m.group(), m.dedupe_key()],
                )?;
            }
            None => {
                tracing::warn!(
                    id,
                    body,
                    "schema v6: a queued message names no known project; dropped"
                );
                tx.execute("DELETE FROM queue WHERE id = ?1", rusqlite::params![id])?;
            }
        }
    }
    Ok(())
}

/// Version 1. Every record is a JSON text column (`record`) beside the key columns that
/// queries need. Tables with large rows keep a rowid (SQLite advises against WITHOUT ROWID
/// for rows larger than a few hundred bytes).
pub(crate) const SCHEMA_V1: &str = r#"
CREATE TABLE projects (
    project_id  TEXT NOT NULL PRIMARY KEY,
    tenant      TEXT NOT NULL,
    record      TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX projects_by_tenant ON projects (tenant, project_id);

CREATE TABLE instances (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id)
);

CREATE TABLE entries (
    project_id     TEXT NOT NULL,
    instance_id    TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    transaction_id TEXT,
    received_at    TEXT NOT NULL,
    jwt            TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id, seq)
);
-- The last sequence of each instance's log: the next sequence without scanning, and the
-- backlog (log ahead of the applied state) from one row per instance.
CREATE TABLE log_heads (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,
    PRIMARY KEY (project_id, instance_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX entries_by_transaction
    ON entries (project_id, instance_id, transaction_id)
    WHERE transaction_id IS NOT NULL;

CREATE TABLE state_headers (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    applied_seq INTEGER NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id)
);

CREATE TABLE state_items (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id, item_id)
);

CREATE TABLE state_products (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    product_id  TEXT NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id, product_id)
);

CREATE TABLE events (
    pos         INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    record      TEXT NOT NULL,
    UNIQUE (project_id, instance_id, event_id)
);
CREATE INDEX events_by_instance ON events (project_id, instance_id, pos);

CREATE TABLE queue (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    message_group TEXT NOT NULL,
    dedupe_key    TEXT NOT NULL,
    body          TEXT NOT NULL,
    sent_at       INTEGER NOT NULL,
    visible_at    INTEGER NOT NULL,
    receipt       TEXT UNIQUE,
    receive_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX queue_by_visibility ON queue (visible_at, id);
CREATE INDEX queue_in_flight ON queue (message_group, visible_at) WHERE receipt IS NOT NULL;
CREATE INDEX queue_unreceived ON queue (dedupe_key) WHERE receive_count = 0;
"#;

/// Version 2: calculated prices and price match rules.
///
/// - `price_calculations`: one row per stored calculation (its id, sequence, trigger and
///   time as a small JSON `record`); unique per (instance, calculation id), so a replayed
///   calculation is recognised, and per (instance, sequence).
/// - `price_latest`: the latest calculation of each instance, whole (every price with its
///   explanation) as one JSON `record`; `seq` is what the next calculation must follow.
/// - `price_history`: one row per calculated price, the `ItemPrice` as JSON, clustered by
///   (instance, sequence, item): a calculation appends its rows in one place instead of
///   touching every page of an item-ordered index. An item's history walks the instance's
///   calculations by sequence with one primary-key lookup each.
/// - `price_matches`: the rule set of each instance as one JSON array, with its version.
const SCHEMA_V2: &str = r#"
CREATE TABLE price_calculations (
    project_id     TEXT NOT NULL,
    instance_id    TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    calculation_id TEXT NOT NULL,
    record         TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id, seq),
    UNIQUE (project_id, instance_id, calculation_id)
) WITHOUT ROWID;

CREATE TABLE price_latest (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id)
);

CREATE TABLE price_history (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    item_id     TEXT NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id, seq, item_id)
) WITHOUT ROWID;

CREATE TABLE price_matches (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    version     INTEGER NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id)
);
"#;

/// Version 3: webhooks.
///
/// - `event_heads`: per instance with events, the position (`events.pos`) of its last
///   event and of the last one dispatched (the outbox mark). A trigger keeps `last_pos`
///   current whoever inserts events (commits, calculations, `append_events`); the partial
///   index holds only instances with undispatched events, so the repair sweep reads those
///   without scanning events. Events stored before this version count as dispatched (no
///   subscription could exist yet).
/// - `subscriptions`: one row per subscription, by (project, id); `instance_id` is `''` at
///   project level (instance ids are never empty), so a scope is (project, instance_id),
///   listed by creation time.
/// - `deliveries`: one row per webhook id. `record` is the delivery with its event's data
///   left out (`null`), `event` the event: attempts and reports rewrite the small record
///   only. Listed per (project, subscription) by creation time; `due_at` (the next
///   attempt's time, null once final) feeds the overdue sweep through a partial index.
/// - `queue`: a `lane` (0 instance work, 1 webhooks; each lane is a queue of its own) and
///   `delayed` (1 while hidden by `retry_later`, not by a receive). Receives walk a lane's
///   visible messages by (visible_at, id) and take each free group's oldest message.
const SCHEMA_V3: &str = r#"
CREATE TABLE event_heads (
    project_id     TEXT NOT NULL,
    instance_id    TEXT NOT NULL,
    last_pos       INTEGER NOT NULL,
    dispatched_pos INTEGER NOT NULL,
    PRIMARY KEY (project_id, instance_id)
) WITHOUT ROWID;
CREATE INDEX event_heads_undispatched ON event_heads (project_id, instance_id)
    WHERE last_pos > dispatched_pos;
INSERT INTO event_heads (project_id, instance_id, last_pos, dispatched_pos)
    SELECT project_id, instance_id, MAX(pos), MAX(pos) FROM events
    GROUP BY project_id, instance_id;
CREATE TRIGGER events_advance_head AFTER INSERT ON events
BEGIN
    INSERT INTO event_heads (project_id, instance_id, last_pos, dispatched_pos)
    VALUES (new.project_id, new.instance_id, new.pos, 0)
    ON CONFLICT (project_id, instance_id) DO UPDATE SET last_pos = excluded.last_pos;
END;

CREATE TABLE subscriptions (
    project_id      TEXT NOT NULL,
    subscription_id TEXT NOT NULL,
    instance_id     TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    record          TEXT NOT NULL,
    PRIMARY KEY (project_id, subscription_id)
) WITHOUT ROWID;
CREATE INDEX subscriptions_by_scope
    ON subscriptions (project_id, instance_id, created_at, subscription_id);

CREATE TABLE deliveries (
    webhook_id      TEXT NOT NULL PRIMARY KEY,
    project_id      TEXT NOT NULL,
    subscription_id TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    due_at          INTEGER,
    record          TEXT NOT NULL,
    event           TEXT NOT NULL
);
CREATE INDEX deliveries_by_subscription
    ON deliveries (project_id, subscription_id, created_at, webhook_id);
CREATE INDEX deliveries_due ON deliveries (due_at, webhook_id) WHERE due_at IS NOT NULL;

ALTER TABLE queue ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue ADD COLUMN delayed INTEGER NOT NULL DEFAULT 0;
DROP INDEX queue_by_visibility;
CREATE INDEX queue_ready ON queue (lane, visible_at, id);
CREATE INDEX queue_by_group ON queue (message_group, id);
"#;

/// Version 4: a subscription's signing secrets (`SubscriptionSecrets` as JSON) beside its
/// record, never inside it: the record is what the API shows. Null for subscriptions
/// created before, until their first rotation.
const SCHEMA_V4: &str = r#"
ALTER TABLE subscriptions ADD COLUMN secrets TEXT;
"#;

/// Wall-clock milliseconds since the epoch (queue times survive restarts).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A sequence or counter as an SQLite integer.
pub(crate) fn to_i64(v: u64, what: &str) -> DbResult<i64> {
    i64::try_from(v)
        .map_err(|_| DbError::Store(StoreError::Failed(format!("{what} {v} too large"))))
}

pub(crate) fn to_u64(v: i64, what: &str) -> DbResult<u64> {
    u64::try_from(v)
        .map_err(|_| DbError::Store(StoreError::Failed(format!("stored {what} {v} is negative"))))
}

/// Reads a text column without copying it.
pub(crate) fn text<'r>(row: &'r rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<&'r str> {
    row.get_ref(idx)?.as_str().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// The instance of a row's `(project_id, instance_id)` columns; the project column holds
/// the tenant-scoped [`ProjectKey::storage_key`].
pub(crate) fn stored_instance_key(project: &str, instance: &str) -> StoreResult<InstanceKey> {
    ProjectKey::from_storage_key(project)
        .zip(InstanceId::parse(instance).ok())
        .map(|(p, i)| p.instance(i))
        .ok_or_else(|| StoreError::Failed(format!("stored key {project}/{instance} is not valid")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: std::ffi::c_int) -> DbError {
        DbError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    /// Issue 15: another program's SQLite file was migrated into (and switched to WAL).
    #[test]
    fn a_foreign_database_is_refused_and_left_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("pricing.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers(name) VALUES ('x');")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let Err(err) = open_writer(&path, Durability::default()) else {
            panic!("a foreign database was opened");
        };
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(
            text.contains("not a pricing database") && text.contains("customers"),
            "{text}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "not changed");
        // An empty file (or a new one) is ours to create.
        let empty = dir.join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        assert!(open_writer(&empty, Durability::default()).is_ok());
    }

    /// A cached statement with `LIMIT ?` runs with new values without being prepared again.
    #[test]
    fn a_bound_limit_does_not_prepare_the_statement_again() {
        let conn = open_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (n INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);",
        )
        .unwrap();
        let sql = "SELECT n FROM t WHERE n > ?1 ORDER BY n LIMIT ?2";
        for (after, limit, want) in [(0, 2, 2), (1, 1, 1), (0, 10, 3), (2, 5, 1)] {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            let rows: Vec<i64> = stmt
                .query_map(rusqlite::params![after, limit], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(rows.len(), want, "after {after} limit {limit}");
            assert_eq!(
                stmt.get_status(rusqlite::StatementStatus::RePrepare),
                0,
                "prepared again for limit {limit}"
            );
        }
    }

    /// Issue 15: a full disk was a 500 (`Failed`); it is worth retrying once space returns.
    #[test]
    fn a_full_disk_is_unavailable_not_a_failure() {
        assert!(matches!(
            sqlite(rusqlite::ffi::SQLITE_FULL).into_store("append"),
            StoreError::Unavailable(m) if m.contains("disk is full")
        ));
        assert!(matches!(
            sqlite(rusqlite::ffi::SQLITE_BUSY).into_store("append"),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            sqlite(rusqlite::ffi::SQLITE_CORRUPT).into_store("append"),
            StoreError::Failed(_)
        ));
    }
}
