use std::time::Duration;

use pricing_core::ids::InstanceKey;
use pricing_core::model::Message;
use pricing_core::ports::{Enqueue, Received, WorkQueue};
use tokio::time::{Instant, sleep};

use crate::fixtures::{Run, process};

/// Timing (and one behaviour) of the queue suite. The defaults suit an in-process queue; a
/// remote queue with whole-second visibility timeouts (SQS) wants `visibility: 1 s,
/// slack: 1.5 s`.
#[derive(Debug, Clone, Copy)]
pub struct QueueTiming {
    /// The visibility timeout used for receives that are meant to expire.
    pub visibility: Duration,
    /// Extra time allowed after a visibility runs out before redelivery is expected.
    pub slack: Duration,
    /// How long to keep receiving while waiting for an expected message.
    pub patience: Duration,
    /// Whether two sends with the same dedupe key, both before any receive, merge into
    /// one message (the embedded queue). A queue that cannot merge them safely (SQS FIFO:
    /// its deduplication would also drop a send made after the first was received) sets
    /// `false`; the suite then checks that each send is delivered (at least once) and that
    /// acknowledging them empties the queue.
    pub pending_sends_merge: bool,
}

impl Default for QueueTiming {
    fn default() -> Self {
        QueueTiming {
            visibility: Duration::from_millis(200),
            slack: Duration::from_millis(250),
            patience: Duration::from_secs(5),
            pending_sends_merge: true,
        }
    }
}

/// WorkQueue with the default timing; see [`work_queue_contract_with`].
pub async fn work_queue_contract<Q: WorkQueue>(queue: &Q) {
    work_queue_contract_with(queue, QueueTiming::default()).await;
}

/// WorkQueue: at-least-once delivery, visibility timeouts and redelivery with a growing
/// receive count and a fresh receipt, merging of a pending (never received) message with
/// the same dedupe key (where `timing.pending_sends_merge`) but not of one already
/// received, one message in flight per group (FIFO groups, oldest first within a group),
/// `ack`, `retry_later`, and receipts that are unknown or expired being a harmless no-op.
///
/// Messages of other runs are acknowledged (deleted) when received: give the suite a
/// queue no one else consumes.
pub async fn work_queue_contract_with<Q: WorkQueue>(queue: &Q, timing: QueueTiming) {
    queue_suite(queue, timing, "queue", process).await;
}

/// The WorkQueue suite ([`work_queue_contract_with`]) with the webhooks lane's messages
/// (`Message::Deliver`, one group per webhook), for the queue that lane's consumers
/// receive from, with the default timing.
pub async fn webhook_queue_contract<Q: WorkQueue>(queue: &Q) {
    webhook_queue_contract_with(queue, QueueTiming::default()).await;
}

/// [`webhook_queue_contract`] with the given timing.
pub async fn webhook_queue_contract_with<Q: WorkQueue>(queue: &Q, timing: QueueTiming) {
    queue_suite(queue, timing, "webhook-queue", deliver).await;
}

/// A `Deliver` message standing for `key` (its webhook id names the run's project).
fn deliver(key: &InstanceKey) -> Message {
    Message::Deliver {
        webhook_id: format!("wh_{}_{}", key.project_id, key.instance_id),
    }
}

/// The suite proper, on the messages `msg` makes (one group and dedupe key per key).
async fn queue_suite<Q: WorkQueue>(
    queue: &Q,
    timing: QueueTiming,
    what: &str,
    msg: fn(&InstanceKey) -> Message,
) {
    let run = Run::new(what);
    let long = Duration::from_secs(60);
    let t = Tester {
        queue,
        run: &run,
        timing,
        msg,
    };

    // Send twice before anyone receives: one message (where pending sends merge).
    let k1 = run.key("p", "dedupe");
    queue.send(&msg(&k1)).await.expect("send");
    queue
        .send(&msg(&k1))
        .await
        .expect("send the same message again");
    let got = t.wait_for(&k1, long).await;
    assert_eq!(got.receive_count, 1, "first delivery has receive count 1");
    assert_eq!(got.message, msg(&k1));
    if timing.pending_sends_merge {
        assert!(
            t.receive_own(10, long).await.iter().all(|r| !t.is(r, &k1)),
            "a pending message with the same dedupe key is merged into the first"
        );
        queue.ack(&got.receipt).await.expect("ack");
    } else {
        // Not merged: the second send is a message of its own, delivered too.
        queue.ack(&got.receipt).await.expect("ack");
        let mut deliveries = 1;
        let deadline = Instant::now() + timing.patience;
        while deliveries < 2 {
            for r in t.receive_own(10, long).await {
                assert!(
                    t.is(&r, &k1),
                    "only {k1}'s messages are expected, got {r:?}"
                );
                assert_eq!(
                    r.receive_count, 1,
                    "the second send is a message of its own (first delivery)"
                );
                queue.ack(&r.receipt).await.expect("ack");
                deliveries += 1;
            }
            assert!(
                deliveries >= 2 || Instant::now() < deadline,
                "each of two unmerged sends is delivered (got {deliveries})"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
    queue
        .ack(&got.receipt)
        .await
        .expect("a second ack of the same receipt is Ok");
    sleep(timing.visibility + timing.slack).await;
    assert!(t.nothing_for(&k1).await, "an acknowledged message is gone");

    // Unknown receipts are a no-op.
    queue
        .ack("no-such-receipt")
        .await
        .expect("ack of an unknown receipt is Ok");
    queue
        .retry_later("no-such-receipt", Duration::from_secs(1))
        .await
        .expect("retry_later of an unknown receipt is Ok");

    // Visibility: a received message hides, then comes back (at-least-once). It hides
    // longer than a check takes on a loaded machine (each check is a request to the
    // emulator on AWS).
    let k2 = run.key("p", "visibility");
    queue.send(&msg(&k2)).await.expect("send");
    let hold = timing.visibility + timing.slack;
    let first = t.wait_for(&k2, hold).await;
    assert_eq!(first.receive_count, 1);
    assert!(
        t.nothing_for(&k2).await,
        "a received message is hidden while in flight"
    );
    sleep(hold + timing.slack).await;
    let second = t.wait_for(&k2, long).await;
    assert_eq!(
        second.receive_count, 2,
        "a message not acknowledged in time is redelivered"
    );
    assert_ne!(
        second.receipt, first.receipt,
        "each delivery has its own receipt"
    );
    queue
        .ack(&first.receipt)
        .await
        .expect("an expired receipt is Ok to ack");
    queue.ack(&second.receipt).await.expect("ack");
    sleep(timing.visibility + timing.slack).await;
    assert!(
        t.nothing_for(&k2).await,
        "acknowledged with the current receipt: gone"
    );

    // A message sent while an earlier one of the group is in flight is not merged, and
    // waits for the group: FIFO, one in flight per group.
    // `a` stays hidden longer than the next send and receive can take on a loaded machine
    // (both are requests to the emulator), then comes back.
    let k3 = run.key("p", "group");
    queue.send(&msg(&k3)).await.expect("send");
    let a = t.wait_for(&k3, hold).await;
    queue.send(&msg(&k3)).await.expect("send while in flight");
    assert!(
        t.nothing_for(&k3).await,
        "a group with a message in flight hands out nothing"
    );
    sleep(hold + timing.slack).await;
    let a2 = t.wait_for(&k3, long).await;
    assert_eq!(
        a2.receive_count, 2,
        "after the visibility runs out, the group's oldest message comes back first"
    );
    assert!(t.nothing_for(&k3).await, "still one in flight per group");
    queue.ack(&a2.receipt).await.expect("ack");
    let b = t.wait_for(&k3, long).await;
    assert_eq!(
        b.receive_count, 1,
        "the message sent while the first was in flight is delivered after it (not merged)"
    );
    assert_ne!(b.receipt, a.receipt);
    queue.ack(&b.receipt).await.expect("ack");
    sleep(timing.visibility + timing.slack).await;
    assert!(
        t.nothing_for(&k3).await,
        "both messages of the group are gone"
    );

    // retry_later: visible again after the delay, still holding its group meanwhile.
    let k4 = run.key("p", "retry");
    queue.send(&msg(&k4)).await.expect("send");
    let r1 = t.wait_for(&k4, long).await;
    // The delay outlasts the check below even on a slow, loaded adapter.
    let delay = timing.visibility + timing.slack;
    queue
        .retry_later(&r1.receipt, delay)
        .await
        .expect("retry_later");
    assert!(t.nothing_for(&k4).await, "hidden during the retry delay");
    sleep(delay + timing.slack).await;
    let r2 = t.wait_for(&k4, long).await;
    assert_eq!(r2.receive_count, 2, "redelivered after the retry delay");
    queue
        .retry_later(&r2.receipt, Duration::ZERO)
        .await
        .expect("retry_later without delay");
    let r3 = t.wait_for(&k4, long).await;
    assert_eq!(
        r3.receive_count, 3,
        "a retry without delay is visible at once"
    );
    queue.ack(&r3.receipt).await.expect("ack");

    // Several groups: each message delivered once while in flight; `max` is honoured.
    let keys: Vec<InstanceKey> = (0..5).map(|n| run.key("p", &format!("many-{n}"))).collect();
    for k in &keys {
        queue.send(&msg(k)).await.expect("send");
    }
    let some = t.receive_own(2, long).await;
    assert!(some.len() <= 2, "receive returns at most max messages");
    let mut got: Vec<Received> = some;
    let deadline = Instant::now() + timing.patience;
    while got.len() < keys.len() && Instant::now() < deadline {
        got.extend(t.receive_own(10, long).await);
        sleep(Duration::from_millis(20)).await;
    }
    let mut seen: Vec<Message> = got.iter().map(|r| r.message.clone()).collect();
    seen.sort_by_key(|m| m.group());
    let mut want: Vec<Message> = keys.iter().map(msg).collect();
    want.sort_by_key(|m| m.group());
    assert_eq!(
        seen, want,
        "every message is delivered, once while in flight"
    );
    for r in &got {
        queue.ack(&r.receipt).await.expect("ack");
    }
    assert!(t.receive_own(10, long).await.is_empty(), "all acknowledged");
}

/// The lanes: messages of the webhooks lane (`Deliver`, `Trigger`) sent through `sender`
/// are received from `webhooks` and never from `work`; instance work (`ProcessInstance`)
/// is received from `work` and never from `webhooks`, whether sent one by one or together
/// (`send_all`). Both queues acknowledge other runs' messages when they receive them: give
/// the suite queues no one else consumes.
pub async fn webhook_lane_contract<E, W, H>(sender: &E, work: &W, webhooks: &H, timing: QueueTiming)
where
    E: Enqueue,
    W: WorkQueue,
    H: WorkQueue,
{
    let run = Run::new("lanes");
    let instance_work = process(&run.key("p", "i"));
    let deliver = Message::Deliver {
        webhook_id: run.webhook_id("d"),
    };
    let trigger = Message::Trigger {
        project: run.project("p"),
        subscription_id: run.subscription_id("s"),
        trigger_id: run.webhook_id("trigger"),
        instance_id: None,
        cursor: None,
    };
    for m in [&deliver, &instance_work, &trigger] {
        sender.send(m).await.expect("send");
    }
    collect(work, &run, &[instance_work], timing, "the work queue").await;
    collect(
        webhooks,
        &run,
        &[deliver, trigger],
        timing,
        "the webhooks queue",
    )
    .await;
    // Many at once (`send_all`): more than an SQS batch holds of each lane, mixed.
    let work_many: Vec<Message> = (0..12)
        .map(|n| process(&run.key("p", &format!("many-{n}"))))
        .collect();
    let deliveries: Vec<Message> = (0..11)
        .map(|n| Message::Deliver {
            webhook_id: run.webhook_id(&format!("many-{n}")),
        })
        .collect();
    let mixed: Vec<Message> = work_many
        .iter()
        .zip(&deliveries)
        .flat_map(|(w, d)| [w.clone(), d.clone()])
        .chain(work_many[11..].iter().cloned())
        .collect();
    sender.send_all(&mixed).await.expect("send_all");
    sender.send_all(&[]).await.expect("send_all of none");
    collect(work, &run, &work_many, timing, "the work queue").await;
    collect(webhooks, &run, &deliveries, timing, "the webhooks queue").await;
    sleep(timing.slack).await;
    collect(work, &run, &[], timing, "the work queue").await;
    collect(webhooks, &run, &[], timing, "the webhooks queue").await;
}

/// Receives (and acknowledges) until every message of `want` came, failing on any other
/// message of this run; with `want` empty, one receive that must bring none of this run.
async fn collect<Q: WorkQueue>(
    queue: &Q,
    run: &Run,
    want: &[Message],
    timing: QueueTiming,
    name: &str,
) {
    let mut missing = want.to_vec();
    let deadline = Instant::now() + timing.patience;
    loop {
        for r in queue
            .receive(10, Duration::from_secs(60))
            .await
            .expect("receive")
        {
            queue.ack(&r.receipt).await.expect("ack");
            if !run.owns(&r.message) {
                continue;
            }
            let Some(pos) = missing.iter().position(|m| *m == r.message) else {
                panic!(
                    "{name} hands out only {want:?} of the messages sent, got {:?} (lane {:?})",
                    r.message,
                    r.message.lane()
                );
            };
            missing.remove(pos);
        }
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {missing:?} did not arrive within {:?}",
            timing.patience
        );
        sleep(Duration::from_millis(20)).await;
    }
}

struct Tester<'a, Q> {
    queue: &'a Q,
    run: &'a Run,
    timing: QueueTiming,
    /// The message standing for a key.
    msg: fn(&InstanceKey) -> Message,
}

impl<Q: WorkQueue> Tester<'_, Q> {
    fn is(&self, r: &Received, key: &InstanceKey) -> bool {
        r.message == (self.msg)(key)
    }

    /// One receive; messages of other runs are acknowledged and dropped.
    async fn receive_own(&self, max: usize, visibility: Duration) -> Vec<Received> {
        let got = self.queue.receive(max, visibility).await.expect("receive");
        let mut own = Vec::new();
        for r in got {
            if self.run.owns(&r.message) {
                own.push(r);
            } else {
                self.queue
                    .ack(&r.receipt)
                    .await
                    .expect("ack a stray message");
            }
        }
        own
    }

    /// Receives until the message of `key` arrives; any other message of this run is a
    /// failure (each step of the suite drains what it sends).
    async fn wait_for(&self, key: &InstanceKey, visibility: Duration) -> Received {
        let deadline = Instant::now() + self.timing.patience;
        loop {
            let mut got = self.receive_own(10, visibility).await;
            assert!(
                got.len() <= 1,
                "only {key}'s message is expected, got {got:?}"
            );
            if let Some(r) = got.pop() {
                assert!(self.is(&r, key), "expected {key}'s message, got {r:?}");
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "{key}'s message did not arrive within {:?}",
                self.timing.patience
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// True when a receive now hands out nothing for `key` (and nothing else of this run).
    async fn nothing_for(&self, key: &InstanceKey) -> bool {
        let got = self.receive_own(10, Duration::from_secs(60)).await;
        for r in &got {
            // Put back whatever came, so that a failing check does not hide later ones.
            self.queue
                .retry_later(&r.receipt, Duration::ZERO)
                .await
                .expect("retry_later");
        }
        got.iter().all(|r| !self.is(r, key)) && got.is_empty()
    }
}
