//! Group commit: the small writes of concurrent requests (entry appends, queue sends) share
//! one SQLite transaction.
//!
//! A job is queued, then run in a group: every job waiting (at most [`MAX_GROUP`]) in one
//! `BEGIN IMMEDIATE` transaction on the writer connection, each inside a savepoint of its
//! own, one commit, and only then is each job answered. So:
//!
//! - an acknowledged write is in a committed transaction, exactly as before (durability is
//!   the connection's: see [`crate::Durability`]);
//! - a job that fails (a validation the store makes, a constraint, a decode error) is
//!   rolled back to its savepoint and answered with its own error; the other jobs of the
//!   group are unaffected; a job that panics counts as failed the same way;
//! - jobs run in the order they were queued, each seeing the ones before it (a duplicate
//!   transaction id in two requests of one group is found by the second);
//! - if the commit itself fails, every job of the group is answered with that error and
//!   nothing of the group is stored.
//!
//! Who runs a group: the caller whose job finds no one leading the queue leads it: it
//! yields once to the runtime (the requests ready meanwhile queue their jobs behind it),
//! then, if the writer connection is free, runs the queued group itself, on its own thread
//! (no hand-off at all); if the writer is taken (by a group in progress, or by the
//! processor's writes) it wakes the group writer thread, which runs what is queued as soon
//! as the writer is free. Callers that find a leader just wait. Either way one commit (one
//! WAL append) serves every request queued meanwhile.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use pricing_core::ports::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::Inner;
use crate::db::DbResult;

/// Jobs in one transaction at most: bounds the wait of the first job of a long queue.
const MAX_GROUP: usize = 256;

/// A queued write: runs inside its savepoint, then answers its caller once the group's
/// fate is known.
trait Job: Send {
    /// Runs the write; `false` if it failed (its savepoint is then rolled back).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Runs once the group committed, before the writer connection is released (so before
    /// any other write can follow): keeps in-memory mirrors of committed state current.
    fn committed(&mut self, inner: &Inner);
    /// Answers the caller: its own error if it failed, else the group's commit result
    /// (also for a job that never ran because the group failed before it).
    fn finish(self: Box<Self>, committed: &Result<(), StoreError>);
}

/// What a job does after its group committed (see [`Job::committed`]).
pub(crate) type AfterCommit<T> = Box<dyn FnOnce(&Inner, &T) + Send>;

struct Pending<T, F> {
    op: &'static str,
    f: Option<F>,
    after: Option<AfterCommit<T>>,
    result: Option<Result<T, StoreError>>,
    answer: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(f) = self.f.take() else { return false };
        let result = match catch_unwind(AssertUnwindSafe(|| f(conn))) {
            Ok(result) => result.map_err(|e| e.into_store(self.op)),
            Err(_) => {
                tracing::error!(op = self.op, "a write panicked; rolled back alone");
                Err(StoreError::Failed(format!("{}: the write failed", self.op)))
            }
        };
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn committed(&mut self, inner: &Inner) {
        if let (Some(Ok(value)), Some(after)) = (&self.result, self.after.take()) {
            after(inner, value);
        }
    }

    fn finish(self: Box<Self>, committed: &Result<(), StoreError>) {
        let answer = match (self.result, committed) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (_, Err(e)) => Err(e.clone()),
            (None, Ok(())) => Err(StoreError::Failed(format!("{}: not run", self.op))),
        };
        let _ = self.answer.send(answer);
    }
}

/// The queue of pending jobs and the handle of the group writer thread.
pub(crate) struct GroupQueue {
    queue: Mutex<Queue>,
    thread: OnceLock<std::thread::Thread>,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Box<dyn Job>>,
    /// Someone will run the queued jobs: a caller that queued the first of them and leads
    /// once it yielded (see [`run`]), or the writer thread when it was woken for them.
    /// Cleared when the queue is taken whole.
    led: bool,
}

impl GroupQueue {
    pub(crate) fn new() -> Self {
        GroupQueue {
            queue: Mutex::new(Queue::default()),
            thread: OnceLock::new(),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the group writer thread of the store `inner` refers to. It holds no strong
    /// reference between groups: it ends once the store is dropped.
    pub(crate) fn start(inner: Weak<Inner>) -> std::io::Result<()> {
        let Some(strong) = inner.upgrade() else {
            return Ok(());
        };
        let thread = std::thread::Builder::new()
            .name("sqlite-group-writer".into())
            .spawn(move || writer_thread(&inner))?;
        let _ = strong.group.thread.set(thread.thread().clone());
        Ok(())
    }

    fn wake_writer(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// Runs `f` in the next group transaction of `inner`'s writer; answers after that
/// transaction committed. `f` must not open a transaction of its own (it runs inside one).
/// `after`, if any, runs once that transaction committed, before the writer connection is
/// released (see [`Job::committed`]).
///
/// The job is queued. A caller whose job finds no one leading the queue leads it: it
/// yields once to the runtime, so that the requests ready meanwhile (on this worker and
/// the others) queue their jobs behind it, then, if the writer connection is free, runs
/// the whole queue as one group right here, without a hand-off; if someone holds the
/// writer, the writer thread takes the queue once it is free. A caller that finds a leader
/// just waits for its answer. (Without the yield, with a few connections, nearly every
/// request committed alone: one WAL append and its locks per request.)
pub(crate) async fn run<T, F>(
    inner: &Inner,
    op: &'static str,
    f: F,
    after: Option<AfterCommit<T>>,
) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
{
    let (answer, answered) = oneshot::channel();
    let lead = {
        let mut queue = inner.group.queue();
        queue.jobs.push(Box::new(Pending {
            op,
            f: Some(f),
            after,
            result: None,
            answer,
        }));
        !std::mem::replace(&mut queue.led, true)
    };
    if lead {
        // Leads when dropped: after the yield, or if this future is dropped while yielding
        // (the jobs behind it must not wait for the writer thread's timeout).
        let leader = Leader(inner);
        tokio::task::yield_now().await;
        drop(leader);
    }
    answered
        .await
        .unwrap_or_else(|_| Err(StoreError::Failed(format!("{op}: the writer stopped"))))
}

/// The caller leading the queue (see [`run`]): leads when dropped.
struct Leader<'a>(&'a Inner);

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        lead_or_hand_over(self.0);
    }
}

/// Runs one group on this thread if the writer is free, else wakes the writer thread,
/// which runs the queue as soon as the writer is free: no job waits for a next caller.
fn lead_or_hand_over(inner: &Inner) {
    match inner.writer.try_lock() {
        Ok(mut conn) => run_queued(inner, &mut conn),
        Err(std::sync::TryLockError::Poisoned(e)) => run_queued(inner, &mut e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => inner.group.wake_writer(),
    }
}

/// Takes the queued jobs (at most [`MAX_GROUP`]) and runs them as one group on `conn`, the
/// writer connection, which the caller holds. Jobs left in the queue (past [`MAX_GROUP`])
/// are the writer thread's.
fn run_queued(inner: &Inner, conn: &mut Connection) {
    let (mut group, more) = {
        let mut queue = inner.group.queue();
        if queue.jobs.len() <= MAX_GROUP {
            queue.led = false;
            (std::mem::take(&mut queue.jobs), false)
        } else {
            queue.led = true;
            (queue.jobs.drain(..MAX_GROUP).collect::<Vec<_>>(), true)
        }
    };
    if group.is_empty() {
        return;
    }
    let committed = run_group(conn, &mut group);
    if committed.is_ok() {
        for job in &mut group {
            job.committed(inner);
        }
    }
    let committed = committed.map_err(|e| e.into_store("group commit"));
    for job in group {
        job.finish(&committed);
    }
    if more {
        inner.group.wake_writer();
    }
}

/// The group writer thread: runs the queued jobs whenever the callers that queued them
/// found the writer taken, until the store is dropped.
fn writer_thread(inner: &Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.group.queue().jobs.is_empty() {
            drop(strong);
            // Woken by `wake_writer`; the timeout notices a dropped store.
            std::thread::park_timeout(Duration::from_millis(200));
            continue;
        }
        {
            let mut conn = crate::lock(&strong.writer);
            run_queued(&strong, &mut conn);
        }
    }
}

/// One transaction holding every job of `group`, each in a savepoint of its own. An error
/// here (begin, a savepoint that cannot be rolled back, commit) is the whole group's: the
/// transaction is rolled back. A group of one job needs no savepoint (its statement journal
/// was a few percent of a one-entry request): if the job fails, the transaction, which
/// holds nothing else, is rolled back and the job answered with its own error.
fn run_group(conn: &mut Connection, group: &mut [Box<dyn Job>]) -> DbResult<()> {
    statement(conn, "BEGIN IMMEDIATE")?;
    let result = match group {
        [job] => {
            if job.run(conn) {
                statement(conn, "COMMIT")
            } else {
                statement(conn, "ROLLBACK")
            }
        }
        _ => run_jobs(conn, group).and_then(|()| statement(conn, "COMMIT")),
    };
    if result.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

fn run_jobs(conn: &Connection, group: &mut [Box<dyn Job>]) -> DbResult<()> {
    for job in group {
        statement(conn, "SAVEPOINT job")?;
        if !job.run(conn) {
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back itself (a full disk while it
                // spilled its cache, an I/O error): nothing of the group is stored, and the
                // other jobs are answered as not done and worth retrying (503), not with
                // the failed `ROLLBACK TO` of a savepoint that is gone (500).
                return Err(crate::db::DbError::Store(
                    pricing_core::ports::StoreError::Unavailable(
                        "the database rolled the transaction back (is the disk full?); \
                         nothing was stored"
                            .into(),
                    ),
                ));
            }
            statement(conn, "ROLLBACK TO job")?;
        }
        statement(conn, "RELEASE job")?;
    }
    Ok(())
}

fn statement(conn: &Connection, sql: &str) -> DbResult<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    /// A job that writes, or that ends the whole transaction as SQLite does on a full disk
    /// while it spills its cache.
    struct Fake {
        ends_the_transaction: bool,
    }

    impl super::Job for Fake {
        fn run(&mut self, conn: &rusqlite::Connection) -> bool {
            if self.ends_the_transaction {
                conn.execute_batch("ROLLBACK").expect("rollback");
                return false;
            }
            conn.execute_batch("CREATE TABLE IF NOT EXISTS t (x); INSERT INTO t VALUES (1)")
                .is_ok()
        }
        fn committed(&mut self, _: &crate::Inner) {}
        fn finish(self: Box<Self>, _: &Result<(), super::StoreError>) {}
    }

    /// When SQLite rolls a group's transaction back itself, the group's answer is a 503
    /// (`Unavailable`: nothing stored, worth retrying), not the 500 of a `ROLLBACK TO` whose
    /// savepoint is gone.
    #[test]
    fn a_transaction_the_database_rolled_back_is_worth_retrying() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut group: Vec<Box<dyn super::Job>> = vec![
            Box::new(Fake {
                ends_the_transaction: false,
            }),
            Box::new(Fake {
                ends_the_transaction: true,
            }),
        ];
        let result = super::run_group(&mut conn, &mut group);
        assert!(
            matches!(
                result,
                Err(crate::db::DbError::Store(super::StoreError::Unavailable(_)))
            ),
            "{result:?}"
        );
        assert!(conn.is_autocommit(), "no transaction is left open");
        let stored: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 't'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(stored, 0, "nothing of the group was stored");
    }
    use std::pin::pin;
    use std::task::{Context, Waker};

    use pricing_core::ports::EntryLog;
    use rusqlite::params;

    /// A leader whose request is dropped while it yields (the client went away) still runs
    /// the queue at once: its job and the ones behind it are not left to the writer
    /// thread's timeout.
    #[tokio::test]
    async fn a_leader_dropped_while_it_yields_still_runs_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::EmbeddedStore::open(&dir.path().join("pricing.db")).unwrap();
        let key = pricing_contract::fixtures::Run::new("leader").key("p", "i");
        let project = key.project_storage_key();
        {
            let job = store.in_group("dropped", move |conn| {
                conn.execute(
                    "INSERT INTO log_heads (project_id, instance_id, last_seq) VALUES (?1, 'i', 7)",
                    params![project],
                )?;
                Ok(())
            });
            let mut job = pin!(job);
            let mut cx = Context::from_waker(Waker::noop());
            assert!(job.as_mut().poll(&mut cx).is_pending(), "the leader yields");
        }
        // Dropped above: its write was committed before the drop returned.
        assert_eq!(store.last_sequence(&key).await.unwrap(), 7);
    }
}
