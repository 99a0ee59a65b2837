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
//! Who runs a group: the caller that queued a job and then finds the writer connection
//! free runs the queued group itself, on its own thread (no hand-off at all); a caller that
//! finds the writer taken (by a group in progress, or by the processor's writes) wakes the
//! group writer thread, which runs what is queued as soon as the writer is free. Either way
//! one commit (one WAL append) serves every request queued meanwhile.

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
    jobs: Mutex<Vec<Box<dyn Job>>>,
    thread: OnceLock<std::thread::Thread>,
}

impl GroupQueue {
    pub(crate) fn new() -> Self {
        GroupQueue {
            jobs: Mutex::new(Vec::new()),
            thread: OnceLock::new(),
        }
    }

    fn jobs(&self) -> MutexGuard<'_, Vec<Box<dyn Job>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
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
/// The job is queued; then, if the writer connection is free, the caller leads: it runs
/// the queued group (its own job among them) right here, without a hand-off. Otherwise
/// someone holds the writer and the writer thread takes the queue once it is free.
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
    inner.group.jobs().push(Box::new(Pending {
        op,
        f: Some(f),
        after,
        result: None,
        answer,
    }));
    lead_or_hand_over(inner);
    answered
        .await
        .unwrap_or_else(|_| Err(StoreError::Failed(format!("{op}: the writer stopped"))))
}

/// Runs one group on this thread if the writer is free, else wakes the writer thread. A
/// job queued while a leader runs its group finds the writer taken and wakes the thread,
/// so no job waits for a next caller.
fn lead_or_hand_over(inner: &Inner) {
    match inner.writer.try_lock() {
        Ok(mut conn) => run_queued(inner, &mut conn),
        Err(std::sync::TryLockError::Poisoned(e)) => run_queued(inner, &mut e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => inner.group.wake_writer(),
    }
}

/// Takes the queued jobs (at most [`MAX_GROUP`]) and runs them as one group on `conn`, the
/// writer connection, which the caller holds.
fn run_queued(inner: &Inner, conn: &mut Connection) {
    let (mut group, more) = {
        let mut jobs = inner.group.jobs();
        if jobs.len() <= MAX_GROUP {
            (std::mem::take(&mut *jobs), false)
        } else {
            (jobs.drain(..MAX_GROUP).collect::<Vec<_>>(), true)
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
        if strong.group.jobs().is_empty() {
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
