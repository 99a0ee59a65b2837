//! ActiveInstances: the scheduler's index of active instances, partitioned by tenant and
//! ordered by due time, written with the instances (flag, time zone, deactivation date),
//! with the header's schedule; a changed schedule makes the instance due; conditional
//! moves of the due time. SchedulerCursors: saved and replaced per step.

use pricing_core::entry::Schedule;
use pricing_core::ids::TenantId;
use pricing_core::ports::{
    ActiveInstances, Commit, InstanceStore, ProjectStore, ScheduleEntry, SchedulerCursors,
    StateStore,
};
use pricing_core::time::Timestamp;

use crate::fixtures::{Run, at, header, instance, plus, project};

pub async fn active_instances_contract<S>(store: &S)
where
    S: ProjectStore + InstanceStore + StateStore + ActiveInstances,
{
    let run = Run::new("active");
    let (a, b) = (run.tenant("a"), run.tenant("b"));
    // Project `pa` is tenant a's, `pb` tenant b's.
    let tkey = |p: &str, i: &str| run.key_of(if p == "pa" { &a } else { &b }, p, i);
    for (p, tenant) in [("pa", &a), ("pb", &b)] {
        store
            .create_project(&project(&run.project_id(p), tenant, "P"))
            .await
            .expect("project");
    }
    let created = at("2026-01-02T03:04:05Z");
    let ended = at("2026-01-01T00:00:00Z");
    // pa: i0 active with a schedule, i1 inactive, i2 active and past its deactivation
    // date (due at that date, before its creation); pb: j0 active, no time zone.
    for (p, i, active) in [
        ("pa", "i0", true),
        ("pa", "i1", false),
        ("pa", "i2", true),
        ("pb", "j0", true),
    ] {
        let key = tkey(p, i);
        let mut inst = instance(&key, "I");
        inst.active = active;
        if i == "i2" {
            inst.deactivation_date = Some(ended);
        }
        if i == "j0" {
            inst.time_zone = None;
        }
        let mut h = header(0, serde_json::json!({}));
        if i == "i0" {
            h.schedule = Some(Schedule::IntervalSeconds(900));
        }
        store.create_instance(&inst, &h).await.expect("create");
    }

    // Tenants: every tenant with an active instance, ascending, paged by `after`.
    let tenants = all_tenants(store).await;
    assert!(tenants.contains(&a) && tenants.contains(&b), "{tenants:?}");
    let after_a = store.scheduled_tenants(Some(&a), 1).await.expect("tenants");
    assert_eq!(
        after_a,
        vec![b.clone()],
        "the page after a tenant starts past it"
    );

    // Due entries: the tenant's own, earliest due first, carrying what the scheduler
    // needs; nothing before it is due; `limit` holds.
    let later = plus(created, 60);
    let due = store.due_instances(&a, later, 10).await.expect("due");
    assert!(due.skipped.is_empty(), "{:?}", due.skipped);
    let keys: Vec<_> = due.items.iter().map(|e| e.key.clone()).collect();
    assert_eq!(keys, vec![tkey("pa", "i2"), tkey("pa", "i0")]);
    let i2 = &due.items[0];
    assert_eq!((i2.due, i2.deactivation_date), (ended, Some(ended)));
    assert_eq!(i2.schedule, None, "no schedule entry: the default applies");
    let i0 = &due.items[1];
    assert_eq!(
        i0,
        &ScheduleEntry {
            key: tkey("pa", "i0"),
            tenant: a.clone(),
            due: created,
            time_zone: Some("Europe/Vienna".into()),
            deactivation_date: None,
            active: true,
            schedule: Some(Schedule::IntervalSeconds(900)),
        }
    );
    let one = store.due_instances(&a, later, 1).await.expect("due");
    assert_eq!(one.items.len(), 1, "at most `limit` entries");
    let early = store
        .due_instances(&a, plus(ended, -1), 10)
        .await
        .expect("due");
    assert!(early.items.is_empty(), "nothing is due before its time");
    let at_ended = store.due_instances(&a, ended, 10).await.expect("due");
    assert_eq!(at_ended.items.len(), 1, "due at exactly its time");
    let b_due = keys_due(store, &b, later).await;
    assert_eq!(b_due, vec![tkey("pb", "j0")], "tenants are apart");

    // A conditional move of the due time: one mover wins, the loser writes nothing.
    let next = plus(created, 900);
    assert!(
        store
            .reschedule(&tkey("pa", "i0"), created, next)
            .await
            .expect("move")
    );
    assert!(
        !store
            .reschedule(&tkey("pa", "i0"), created, plus(next, 1))
            .await
            .expect("move"),
        "the due time is no longer the one read"
    );
    assert!(
        !store
            .reschedule(&tkey("pa", "i1"), created, next)
            .await
            .expect("move"),
        "an inactive instance has no entry"
    );
    assert_eq!(keys_due(store, &a, later).await, vec![tkey("pa", "i2")]);
    let moved = store.due_instances(&a, next, 10).await.expect("due");
    assert_eq!(moved.items[1].key, tkey("pa", "i0"));
    assert_eq!(moved.items[1].due, next);

    // put_instance: the flag off takes the entry out, on puts it in (due at updatedAt),
    // and a changed time zone or deactivation date shows.
    let mut off = instance(&tkey("pa", "i2"), "I");
    off.active = false;
    store.put_instance(&off, created).await.expect("put");
    let mut on = instance(&tkey("pa", "i1"), "I");
    on.updated_at = plus(created, 30);
    on.time_zone = Some("America/New_York".into());
    on.deactivation_date = Some(plus(created, 7_200));
    store.put_instance(&on, created).await.expect("put");
    let due = store.due_instances(&a, next, 10).await.expect("due");
    let keys: Vec<_> = due.items.iter().map(|e| e.key.clone()).collect();
    assert_eq!(keys, vec![tkey("pa", "i1"), tkey("pa", "i0")]);
    assert_eq!(due.items[0].due, plus(created, 30));
    assert_eq!(due.items[0].time_zone.as_deref(), Some("America/New_York"));
    assert_eq!(due.items[0].deactivation_date, Some(plus(created, 7_200)));

    // A commit that changes the schedule makes the instance due at once; one that keeps
    // it leaves the due time alone.
    let j0 = tkey("pb", "j0");
    let far = at("2100-01-01T00:00:00Z");
    assert!(store.reschedule(&j0, created, far).await.expect("move"));
    let mut h = header(1, serde_json::json!({}));
    h.schedule = Some(Schedule::IntervalSeconds(300));
    store
        .commit(&j0, commit(0, h.clone()))
        .await
        .expect("commit");
    let soon = plus(Timestamp::now(), 3_600);
    let due = store.due_instances(&b, soon, 10).await.expect("due");
    assert_eq!(due.items.len(), 1, "the new schedule is due at once");
    assert_eq!(due.items[0].schedule, Some(Schedule::IntervalSeconds(300)));
    assert!(
        store
            .reschedule(&j0, due.items[0].due, far)
            .await
            .expect("move")
    );
    h.applied_seq = 2;
    store.commit(&j0, commit(1, h)).await.expect("commit");
    assert!(
        keys_due(store, &b, soon).await.is_empty(),
        "an unchanged schedule keeps the due time"
    );

    // Inactive instances awaiting their deactivation event (issue 11, item 4): indexed
    // until the event, due at their date, marked inactive; a changed schedule does not
    // move them; written at or after the date (the deactivation) they leave the index.
    let c = run.tenant("c");
    store
        .create_project(&project(&run.project_id("pc"), &c, "P"))
        .await
        .expect("project");
    let date = plus(Timestamp::now(), 2 * 86_400);
    let (waits, announced) = (run.key_of(&c, "pc", "w"), run.key_of(&c, "pc", "x"));
    for (key, deactivation) in [(&waits, date), (&announced, plus(created, -1))] {
        let mut inst = instance(key, "I");
        inst.active = false;
        inst.deactivation_date = Some(deactivation);
        store
            .create_instance(&inst, &header(0, serde_json::json!({})))
            .await
            .expect("create");
    }
    assert!(keys_due(store, &c, plus(date, -1)).await.is_empty());
    let due = store.due_instances(&c, date, 10).await.expect("due");
    assert_eq!(due.items.len(), 1, "only the one awaiting its event");
    let w = &due.items[0];
    assert_eq!(
        (&w.key, w.due, w.deactivation_date, w.active),
        (&waits, date, Some(date), false)
    );
    let mut h = header(1, serde_json::json!({}));
    h.schedule = Some(Schedule::IntervalSeconds(300));
    store.commit(&waits, commit(0, h)).await.expect("commit");
    assert!(
        keys_due(store, &c, soon).await.is_empty(),
        "a changed schedule does not make an inactive instance due"
    );
    let mut done = instance(&waits, "I");
    done.active = false;
    done.deactivation_date = Some(date);
    done.updated_at = date;
    store.put_instance(&done, created).await.expect("put");
    assert!(keys_due(store, &c, plus(date, 60)).await.is_empty());

    // A record that says whether its event was emitted is indexed by that, however it
    // was written: turned inactive after its date by a user (not announced) it stays,
    // due at its date, until the deactivation says it was announced.
    let user = run.key_of(&c, "pc", "u");
    let mut inst = instance(&user, "I");
    inst.deactivation_date = Some(date);
    inst.deactivation_announced = Some(false);
    store
        .create_instance(&inst, &header(0, serde_json::json!({})))
        .await
        .expect("create");
    let read_at = inst.updated_at;
    inst.active = false;
    inst.updated_at = plus(date, 10);
    store.put_instance(&inst, read_at).await.expect("put");
    let due = store
        .due_instances(&c, plus(date, 60), 10)
        .await
        .expect("due");
    assert_eq!(
        due.items
            .iter()
            .map(|e| (&e.key, e.due))
            .collect::<Vec<_>>(),
        vec![(&user, date)],
        "written inactive after its date, not announced: still indexed"
    );
    let read_at = inst.updated_at;
    inst.deactivation_announced = Some(true);
    inst.updated_at = plus(date, 20);
    store.put_instance(&inst, read_at).await.expect("put");
    assert!(
        keys_due(store, &c, plus(date, 60)).await.is_empty(),
        "announced: out of the index"
    );
}

/// SchedulerCursors: none before the first save, then the last one saved, per step.
pub async fn scheduler_cursors_contract<S: SchedulerCursors>(store: &S) {
    let run = Run::new("cursor");
    let (one, two) = (run.webhook_id("one"), run.webhook_id("two"));
    assert_eq!(store.load_cursor(&one).await.expect("load"), None);
    store.save_cursor(&one, "tenant-a").await.expect("save");
    store.save_cursor(&two, "x").await.expect("save");
    assert_eq!(
        store.load_cursor(&one).await.expect("load").as_deref(),
        Some("tenant-a")
    );
    store.save_cursor(&one, "tenant-b").await.expect("save");
    assert_eq!(
        store.load_cursor(&one).await.expect("load").as_deref(),
        Some("tenant-b")
    );
    assert_eq!(
        store.load_cursor(&two).await.expect("load").as_deref(),
        Some("x")
    );
}

fn commit(expected_applied: u64, header: pricing_core::state::Header) -> Commit {
    Commit {
        expected_applied,
        header,
        items: Vec::new(),
        products: Vec::new(),
        events: Vec::new(),
    }
}

async fn keys_due<S: ActiveInstances>(
    store: &S,
    tenant: &TenantId,
    now: Timestamp,
) -> Vec<pricing_core::ids::InstanceKey> {
    let page = store.due_instances(tenant, now, 100).await.expect("due");
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    page.items.into_iter().map(|e| e.key).collect()
}

/// Every listed tenant, a page of 2 at a time, checking the order.
async fn all_tenants<S: ActiveInstances>(store: &S) -> Vec<TenantId> {
    let mut out: Vec<TenantId> = Vec::new();
    loop {
        let page = store
            .scheduled_tenants(out.last(), 2)
            .await
            .expect("tenants");
        assert!(page.len() <= 2, "at most `limit` tenants");
        if page.is_empty() {
            return out;
        }
        for t in page {
            assert!(out.last().is_none_or(|l| *l < t), "ascending, each once");
            out.push(t);
        }
    }
}
