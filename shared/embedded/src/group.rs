//! Group commit: the small writes of concurrent requests (entry appends, queue sends) share
//! one SQLite transaction.
//!
//! One thread, the group writer, drains a queue of pending jobs: it takes every job waiting
//! (at most [`MAX_GROUP`]), opens one `BEGIN IMMEDIATE` transaction on the writer
//! connection, runs each job inside a savepoint of its own, commits once, and only then
//! answers each job. So:
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
//! On the request path this replaces, per call, a hand-off to tokio's blocking pool and a
//! contended mutex with a push onto a channel: under load the writer is busy and needs no
//! wake-up, and one commit (one WAL append) serves many requests.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Weak;

use pricing_core::ports::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

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

/// The sending side of the group writer's queue; the writer thread ends once it is dropped.
pub(crate) struct GroupQueue {
    jobs: mpsc::UnboundedSender<Box<dyn Job>>,
}

/// The group writer's end of the queue, until [`GroupWriter::start`] hands it to its thread.
pub(crate) struct GroupWriter {
    rx: mpsc::UnboundedReceiver<Box<dyn Job>>,
}

impl GroupQueue {
    pub(crate) fn new() -> (GroupQueue, GroupWriter) {
        let (jobs, rx) = mpsc::unbounded_channel();
        (GroupQueue { jobs }, GroupWriter { rx })
    }

    /// Runs `f` in the next group transaction; answers after that transaction committed.
    /// `f` must not open a transaction of its own (it runs inside one).
    /// `after`, if any, runs once that transaction committed, before the writer connection
    /// is released (see [`Job::committed`]).
    pub(crate) async fn run<T, F>(
        &self,
        op: &'static str,
        f: F,
        after: Option<AfterCommit<T>>,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job = Box::new(Pending {
            op,
            f: Some(f),
            after,
            result: None,
            answer,
        });
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Failed(format!("{op}: the store's writer has stopped")))?;
        answered
            .await
            .unwrap_or_else(|_| Err(StoreError::Failed(format!("{op}: the writer stopped"))))
    }
}

impl GroupWriter {
    /// Starts the group writer thread on the writer connection of the store `inner`
    /// refers to. It holds no strong reference: it ends once the store is dropped.
    pub(crate) fn start(self, inner: Weak<Inner>) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("sqlite-group-writer".into())
            .spawn(move || run(&inner, self.rx))?;
        Ok(())
    }
}

/// The group writer: one transaction per batch of queued jobs, until the store is dropped.
fn run(inner: &Weak<Inner>, mut rx: mpsc::UnboundedReceiver<Box<dyn Job>>) {
    let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = rx.blocking_recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return; // The store is gone; dropping the jobs answers their callers.
        };
        let committed = {
            let mut conn = crate::lock(&inner.writer);
            let committed = run_group(&mut conn, &mut group);
            if committed.is_ok() {
                for job in &mut group {
                    job.committed(&inner);
                }
            }
            committed.map_err(|e| e.into_store("group commit"))
        };
        drop(inner);
        for job in group.drain(..) {
            job.finish(&committed);
        }
    }
}

/// One transaction holding every job of `group`, each in a savepoint of its own. An error
/// here (begin, a savepoint that cannot be rolled back, commit) is the whole group's: the
/// transaction is rolled back.
fn run_group(conn: &mut Connection, group: &mut [Box<dyn Job>]) -> DbResult<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = run_jobs(conn, group).and_then(|()| Ok(conn.execute_batch("COMMIT")?));
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
