//! The scheduler on a store (issue 9, item 4): every step of a run is bounded, tenants
//! are served in turn, and repeated runs cover everything. It runs whole scheduler passes
//! over every tenant of the store, so it needs a store of its own (it is not part of
//! `all_contracts`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use pricing_core::ids::InstanceKey;
use pricing_core::model::Message;
use pricing_core::ports::{Enqueue, EntryLog, ProjectStore, StoreResult};
use pricing_core::scheduler::{self, Budgets, DUE_CURSOR, RunTime, SchedulerStore};
use pricing_core::time::Timestamp;

use crate::fixtures::{Run, delivery, header, instance, new_entry, plus, project, subscription};

/// A queue that records what is sent (the queue is not what this suite checks).
#[derive(Default)]
pub struct Recorder(Mutex<Vec<Message>>);

impl Recorder {
    fn take(&self) -> Vec<Message> {
        std::mem::take(&mut *self.0.lock().expect("recorder"))
    }
}

impl Enqueue for Recorder {
    async fn send(&self, message: &Message) -> StoreResult<()> {
        self.0.lock().expect("recorder").push(message.clone());
        Ok(())
    }
}

/// With a due budget of 4 (2 per tenant per pass) and 12 due instances of tenant `a`
/// (whose name sorts first), one run still calculates tenant `b`'s due instance,
/// deactivates tenant `c`'s, sweeps the lost wake-up and re-enqueues the overdue
/// delivery; and runs one after another cover all of `a`'s instances, each once.
pub async fn scheduler_contract<S>(store: &S)
where
    S: SchedulerStore + ProjectStore + EntryLog,
{
    let run = Run::new("sched");
    let (a, b, c) = (run.tenant("a"), run.tenant("b"), run.tenant("c"));
    // Project `pa` is tenant a's, `pb` b's, `pc` c's.
    let tkey = |p: &str, i: &str| {
        let tenant = match p {
            "pa" => &a,
            "pb" => &b,
            _ => &c,
        };
        run.key_of(tenant, p, i)
    };
    for (p, tenant) in [("pa", &a), ("pb", &b), ("pc", &c)] {
        store
            .create_project(&project(&run.project_id(p), tenant, "P"))
            .await
            .expect("project");
    }
    let now = Timestamp::now();
    let created = plus(now, -600);
    let many: Vec<InstanceKey> = (0..12).map(|i| tkey("pa", &format!("i{i:02}"))).collect();
    let b_key = tkey("pb", "j");
    let c_key = tkey("pc", "k");
    for key in many.iter().chain([&b_key, &c_key]) {
        let mut inst = instance(key, "I");
        inst.updated_at = created;
        if *key == c_key {
            inst.deactivation_date = Some(plus(now, -60));
        }
        store
            .create_instance(&inst, &header(0, serde_json::json!({})))
            .await
            .expect("create");
    }
    // A wake-up that was lost (the repair sweep's work) and a delivery whose message was
    // lost (the webhook sweep's).
    let behind = tkey("pb", "behind");
    let mut idle = instance(&behind, "I");
    idle.active = false;
    store
        .create_instance(&idle, &header(0, serde_json::json!({})))
        .await
        .expect("create");
    store
        .append(&behind, vec![new_entry(Some("t1"), 1)])
        .await
        .expect("append");
    let sub = subscription(run.subscription_id("s"), &b_key.project(), None, created);
    let lost = delivery(&b_key, &sub, &run.webhook_id("lost"), plus(now, -3_600));
    store
        .create_deliveries(std::slice::from_ref(&lost))
        .await
        .expect("delivery");

    let budgets = Budgets {
        sweep: 100,
        webhooks: 100,
        due: 4,
        per_tenant: 2,
        tenant_page: 1,
    };
    let queue = Recorder::default();
    let hour = Duration::from_secs(3_600);
    let first = scheduler::run(store, &queue, now, RunTime::starting_now(hour), &budgets).await;
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    let sent = queue.take();
    let calculated = |sent: &[Message]| -> Vec<InstanceKey> {
        sent.iter()
            .filter_map(|m| match m {
                Message::Recalculate { key, .. } => Some(key.clone()),
                _ => None,
            })
            .collect()
    };
    let first_calculated = calculated(&sent);
    assert!(
        first_calculated.contains(&b_key),
        "tenant b's due instance waits for no other tenant: {first_calculated:?}"
    );
    let of_a = first_calculated.iter().filter(|k| many.contains(k)).count();
    assert_eq!(
        of_a, 2,
        "tenant a gets its share, not the run: {first_calculated:?}"
    );
    assert_eq!(first.scheduled, 3);
    assert_eq!(first.deactivated, 1, "deactivations run");
    assert!(
        !store
            .get_instance(&c_key)
            .await
            .expect("get")
            .expect("c")
            .active
    );
    assert!(sent.contains(&Message::ProcessInstance { key: c_key.clone() }));
    assert_eq!(first.swept, 1, "the repair sweep runs");
    assert!(sent.contains(&Message::ProcessInstance {
        key: behind.clone()
    }));
    assert_eq!(first.overdue, 1, "the webhook sweep runs");
    assert!(sent.contains(&Message::Deliver {
        webhook_id: lost.webhook_id.clone()
    }));
    assert_eq!(
        first.stopped,
        vec!["due instances"],
        "the due budget is spent"
    );
    assert!(
        store
            .load_cursor(DUE_CURSOR)
            .await
            .expect("cursor")
            .is_some(),
        "the run saved where it stopped"
    );

    // Runs one after another: each within its budget, together over all of a's instances,
    // each calculated once (its slot is then done and its due time moved to the next).
    let mut counts: BTreeMap<InstanceKey, usize> = BTreeMap::new();
    for key in first_calculated {
        *counts.entry(key).or_default() += 1;
    }
    for _ in 0..10 {
        let report =
            scheduler::run(store, &queue, now, RunTime::starting_now(hour), &budgets).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert!(
            report.scheduled + report.deactivated + report.already_calculated <= budgets.due,
            "a run stays within its budget: {report:?}"
        );
        let keys = calculated(&queue.take());
        if keys.is_empty() {
            break;
        }
        for key in keys {
            *counts.entry(key).or_default() += 1;
        }
    }
    for key in &many {
        assert_eq!(
            counts.get(key),
            Some(&1),
            "{key} calculated once: {counts:?}"
        );
    }
    assert_eq!(counts.get(&b_key), Some(&1));
    inactive_instances_get_their_deactivation_event(store, &run, now).await;
}

/// `instance.deactivated` is sent for every instance whose deactivation date passes,
/// active or not (issue 11, item 4): an inactive one is due at its date, gets its event
/// once and leaves the index; one written after its date passed was not waiting.
async fn inactive_instances_get_their_deactivation_event<S>(store: &S, run: &Run, now: Timestamp)
where
    S: SchedulerStore + ProjectStore,
{
    let d = run.tenant("d");
    store
        .create_project(&project(&run.project_id("pd"), &d, "P"))
        .await
        .expect("project");
    let (passed, later) = (
        run.key_of(&d, "pd", "passed"),
        run.key_of(&d, "pd", "later"),
    );
    for (key, date) in [(&passed, plus(now, -60)), (&later, plus(now, 3_600))] {
        let mut inst = instance(key, "I");
        inst.active = false;
        inst.updated_at = plus(now, -600);
        inst.deactivation_date = Some(date);
        store
            .create_instance(&inst, &header(0, serde_json::json!({})))
            .await
            .expect("create");
    }
    let due = store.due_instances(&d, now, 10).await.expect("due");
    let keys: Vec<_> = due.items.iter().map(|e| e.key.clone()).collect();
    assert_eq!(
        keys,
        vec![passed.clone()],
        "only the date that passed is due"
    );
    let queue = Recorder::default();
    let entry = &due.items[0];
    assert_eq!(
        scheduler::handle_due(store, &queue, entry, now)
            .await
            .expect("due"),
        scheduler::Due::Deactivated
    );
    let events = store.list_events(&passed, None, 10).await.expect("events");
    let types: Vec<_> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, vec!["instance.deactivated"]);
    assert_eq!(
        queue.take(),
        vec![Message::ProcessInstance {
            key: passed.clone()
        }],
        "a wake-up dispatches the event"
    );
    let stored = store.get_instance(&passed).await.expect("get").expect("it");
    assert!(!stored.active);
    assert!(
        store
            .due_instances(&d, now, 10)
            .await
            .expect("due")
            .items
            .is_empty(),
        "announced, it leaves the index"
    );
    // A stale index read does not announce it twice.
    assert_eq!(
        scheduler::handle_due(store, &queue, entry, now)
            .await
            .expect("due"),
        scheduler::Due::Taken
    );
    assert!(queue.take().is_empty());
    // The later one waits for its date.
    let due = store
        .due_instances(&d, plus(now, 3_600), 10)
        .await
        .expect("due");
    assert_eq!(due.items.len(), 1);
    assert_eq!((&due.items[0].key, due.items[0].active), (&later, false));
}
