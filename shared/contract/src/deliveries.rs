use pricing_core::ids::{InstanceKey, ProjectKey, SubscriptionId};
use pricing_core::ports::{DeliveryStore, StoreError, StoreResult};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::delivery::MAX_CLIENT_REPORTS;
use pricing_core::webhooks::{ClientReport, Delivery, DeliverySummary, Subscription};
use serde_json::json;

use crate::fixtures::{Run, at, attempt, client_report, delivery, plus, subscription};
use crate::{check_pages, join_all, page_request};

fn ids(deliveries: &[Delivery]) -> Vec<String> {
    deliveries.iter().map(|d| d.webhook_id.clone()).collect()
}

fn listed_ids(summaries: &[DeliverySummary]) -> Vec<String> {
    summaries.iter().map(|d| d.webhook_id.clone()).collect()
}

fn by_id(mut summaries: Vec<DeliverySummary>) -> Vec<DeliverySummary> {
    summaries.sort_by(|a, b| a.webhook_id.cmp(&b.webhook_id));
    summaries
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

async fn get<S: DeliveryStore>(store: &S, webhook_id: &str) -> Option<Delivery> {
    store.get_delivery(webhook_id).await.expect("get_delivery")
}

async fn create<S: DeliveryStore>(store: &S, deliveries: &[Delivery]) -> Vec<String> {
    store
        .create_deliveries(deliveries)
        .await
        .expect("create_deliveries")
}

/// DeliveryStore: deliveries created idempotently (only the newly stored ids returned, a
/// stored one never overwritten) and read back whole; `record_attempt` writes an attempt
/// only when the delivery is not final and has made `attempt - 1` attempts (`Ok(false)`
/// otherwise, also for the loser of concurrent attempts; `NotFound` when missing) and keeps
/// the client reports; `add_client_report` keeps the first `MAX_CLIENT_REPORTS`, also
/// under concurrent reports (`NotFound` when missing); `list_deliveries` lists one
/// subscription's deliveries of one project as their summaries (the stored delivery
/// without its event), newest first, with cursor paging (a cursor the store never handed
/// out is `NotFound`);
/// `overdue_deliveries` lists the non-final deliveries due before a time, oldest due
/// first, at most `limit`; `postpone` moves a non-final delivery's due time only while it
/// is the one given (`Ok(false)` otherwise, one winner among concurrent postpones;
/// `NotFound` when missing), and the delivery is overdue again only after the new time.
pub async fn delivery_store_contract<S: DeliveryStore>(store: &S) {
    let run = Run::new("deliveries");
    let key = run.key("p", "i");
    let t0 = at("2026-05-06T07:08:09.010Z");
    let sub = subscription(run.subscription_id("a"), &key.project(), None, t0);

    assert_eq!(get(store, &run.webhook_id("none")).await, None);
    assert_eq!(
        store
            .record_attempt(&run.webhook_id("none"), &attempt(1, t0, None, true))
            .await,
        Err(StoreError::NotFound),
        "recording an attempt of an unknown delivery is NotFound"
    );
    assert_eq!(
        store
            .add_client_report(&run.webhook_id("none"), &client_report("x", t0))
            .await,
        Err(StoreError::NotFound),
        "reporting on an unknown delivery is NotFound"
    );
    assert!(
        create(store, &[]).await.is_empty(),
        "creating no deliveries stores none"
    );

    // Idempotent creation.
    let d1 = delivery(&key, &sub, "evt-1", plus(t0, 1));
    let d2 = delivery(&key, &sub, "evt-2", plus(t0, 2));
    let d3 = delivery(&key, &sub, "evt-3", plus(t0, 3));
    assert_eq!(
        sorted(create(store, &[d1.clone(), d2.clone(), d3.clone()]).await),
        sorted(ids(&[d1.clone(), d2.clone(), d3.clone()])),
        "new deliveries are stored and their ids returned"
    );
    for d in [&d1, &d2, &d3] {
        assert_eq!(
            get(store, &d.webhook_id).await.as_ref(),
            Some(d),
            "a delivery reads back whole (with its event)"
        );
    }
    let mut d1_again = d1.clone();
    d1_again.created_at = plus(t0, 50);
    d1_again.event.data = json!({"replayed": true});
    let d4 = delivery(&key, &sub, "evt-4", plus(t0, 4));
    assert_eq!(
        create(store, &[d1_again, d2.clone(), d4.clone()]).await,
        vec![d4.webhook_id.clone()],
        "a repeated create returns only the ids it stored"
    );
    assert_eq!(
        get(store, &d1.webhook_id).await.as_ref(),
        Some(&d1),
        "a stored delivery is never overwritten by a create"
    );
    assert!(
        create(store, &[d1.clone(), d2, d3, d4]).await.is_empty(),
        "repeating a dispatch creates nothing"
    );

    attempts(store, &key, &sub, t0).await;
    reports(store, &key, &sub, t0).await;
    listing(store, &run, t0).await;
    overdue(store, &key, &sub).await;
    postponing(store, &key, &sub).await;
}

/// `record_attempt` is conditional on the attempts made and on the status.
async fn attempts<S: DeliveryStore>(
    store: &S,
    key: &InstanceKey,
    sub: &Subscription,
    t0: Timestamp,
) {
    let d = delivery(key, sub, "evt-att-1", t0);
    create(store, std::slice::from_ref(&d)).await;
    for wrong in [0, 2, 3] {
        assert_eq!(
            store
                .record_attempt(&d.webhook_id, &attempt(wrong, t0, None, true))
                .await,
            Ok(false),
            "attempt {wrong} on a delivery with no attempts is refused"
        );
    }
    assert_eq!(
        get(store, &d.webhook_id).await.as_ref(),
        Some(&d),
        "a refused attempt writes nothing"
    );

    let mut expected = d.clone();
    let u1 = attempt(1, plus(t0, 1), Some(plus(t0, 6)), false);
    assert_eq!(
        store.record_attempt(&d.webhook_id, &u1).await,
        Ok(true),
        "the first attempt is recorded"
    );
    u1.apply(&mut expected);
    assert_eq!(get(store, &d.webhook_id).await.as_ref(), Some(&expected));
    assert_eq!(
        store.record_attempt(&d.webhook_id, &u1).await,
        Ok(false),
        "the same attempt again (a duplicate message) is refused"
    );
    let u2 = attempt(2, plus(t0, 7), None, true);
    assert_eq!(store.record_attempt(&d.webhook_id, &u2).await, Ok(true));
    u2.apply(&mut expected);
    assert_eq!(
        get(store, &d.webhook_id).await.as_ref(),
        Some(&expected),
        "each recorded attempt is kept in order"
    );
    assert_eq!(
        store
            .record_attempt(&d.webhook_id, &attempt(3, plus(t0, 8), None, false))
            .await,
        Ok(false),
        "a succeeded delivery takes no more attempts"
    );
    assert_eq!(get(store, &d.webhook_id).await.as_ref(), Some(&expected));

    let failed = delivery(key, sub, "evt-att-2", t0);
    create(store, std::slice::from_ref(&failed)).await;
    assert_eq!(
        store
            .record_attempt(&failed.webhook_id, &attempt(1, t0, None, false))
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .record_attempt(&failed.webhook_id, &attempt(2, t0, Some(t0), false))
            .await,
        Ok(false),
        "a failed delivery takes no more attempts"
    );

    // Concurrent attempts (duplicate messages): exactly one is recorded.
    let raced = delivery(key, sub, "evt-att-3", t0);
    create(store, std::slice::from_ref(&raced)).await;
    let updates: Vec<_> = (0..5)
        .map(|n| attempt(1, plus(t0, n), Some(plus(t0, 100 + n)), n % 2 == 0))
        .collect();
    let results: Vec<StoreResult<bool>> = join_all(
        updates
            .iter()
            .map(|u| store.record_attempt(&raced.webhook_id, u))
            .collect(),
    )
    .await;
    let winners: Vec<_> = updates
        .iter()
        .zip(&results)
        .filter(|(_, r)| **r == Ok(true))
        .map(|(u, _)| u)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "concurrent attempts with one number: exactly one is recorded, got {results:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(_) | Err(StoreError::Unavailable(_)))),
        "the losers are refused: {results:?}"
    );
    let mut expected = raced.clone();
    winners[0].apply(&mut expected);
    assert_eq!(
        get(store, &raced.webhook_id).await.as_ref(),
        Some(&expected),
        "the winner's attempt alone is stored"
    );
}

/// Client reports: the oldest `MAX_CLIENT_REPORTS` kept, attempts keep them.
async fn reports<S: DeliveryStore>(
    store: &S,
    key: &InstanceKey,
    sub: &Subscription,
    t0: Timestamp,
) {
    let d = delivery(key, sub, "evt-rep-1", t0);
    create(store, std::slice::from_ref(&d)).await;
    let r0 = client_report("the first one", plus(t0, 1));
    store
        .add_client_report(&d.webhook_id, &r0)
        .await
        .expect("add_client_report");
    let mut expected = d.clone();
    expected.client_reports.push(r0.clone());
    assert_eq!(
        get(store, &d.webhook_id).await.as_ref(),
        Some(&expected),
        "a client report is stored on its delivery"
    );
    let u1 = attempt(1, plus(t0, 2), Some(plus(t0, 9)), false);
    assert_eq!(store.record_attempt(&d.webhook_id, &u1).await, Ok(true));
    u1.apply(&mut expected);
    assert_eq!(
        get(store, &d.webhook_id).await.as_ref(),
        Some(&expected),
        "recording an attempt keeps the client reports"
    );
    let more: Vec<ClientReport> = (1..MAX_CLIENT_REPORTS + 3)
        .map(|n| {
            client_report(
                &format!("report {n}"),
                plus(t0, 10 + i64::try_from(n).expect("small")),
            )
        })
        .collect();
    for r in &more {
        store
            .add_client_report(&d.webhook_id, r)
            .await
            .expect("add_client_report past the limit is Ok");
    }
    expected.client_reports.extend(more.iter().cloned());
    expected.client_reports.truncate(MAX_CLIENT_REPORTS);
    assert_eq!(
        get(store, &d.webhook_id).await.as_ref(),
        Some(&expected),
        "the first MAX_CLIENT_REPORTS reports are kept, in order"
    );
    let u2 = attempt(2, plus(t0, 99), None, true);
    assert_eq!(store.record_attempt(&d.webhook_id, &u2).await, Ok(true));
    u2.apply(&mut expected);
    assert_eq!(get(store, &d.webhook_id).await.as_ref(), Some(&expected));

    // Reports on a final delivery are taken too (receivers report after a 2xx).
    let r_late = client_report("late", plus(t0, 200));
    let done = delivery(key, sub, "evt-rep-2", t0);
    create(store, std::slice::from_ref(&done)).await;
    assert_eq!(
        store
            .record_attempt(&done.webhook_id, &attempt(1, t0, None, true))
            .await,
        Ok(true)
    );
    store
        .add_client_report(&done.webhook_id, &r_late)
        .await
        .expect("add_client_report on a succeeded delivery");
    assert_eq!(
        get(store, &done.webhook_id).await.map(|d| d.client_reports),
        Some(vec![r_late])
    );

    // Concurrent reports: never more than the limit.
    let busy = delivery(key, sub, "evt-rep-3", t0);
    create(store, std::slice::from_ref(&busy)).await;
    let many: Vec<ClientReport> = (0..MAX_CLIENT_REPORTS + 10)
        .map(|n| client_report(&format!("concurrent {n}"), t0))
        .collect();
    let results = join_all(
        many.iter()
            .map(|r| store.add_client_report(&busy.webhook_id, r))
            .collect(),
    )
    .await;
    assert!(
        results.iter().all(Result::is_ok),
        "concurrent reports are Ok: {results:?}"
    );
    let kept = get(store, &busy.webhook_id)
        .await
        .expect("stored")
        .client_reports;
    assert_eq!(
        kept.len(),
        MAX_CLIENT_REPORTS,
        "concurrent reports: exactly MAX_CLIENT_REPORTS kept"
    );
    assert!(kept.iter().all(|r| many.contains(r)));
}

/// `list_deliveries`: one (project, subscription), newest first, paged.
async fn listing<S: DeliveryStore>(store: &S, run: &Run, t0: Timestamp) {
    let project = run.project("list");
    let key_i = project.instance(crate::fixtures::instance_id("i"));
    let key_j = project.instance(crate::fixtures::instance_id("j"));
    let sub_l = subscription(run.subscription_id("l"), &project, None, t0);
    let sub_m = subscription(run.subscription_id("m"), &project, None, t0);

    let mine: Vec<Delivery> = [
        (&key_i, "e10", 10),
        (&key_i, "e30", 30),
        (&key_j, "e20", 20),
        (&key_i, "e40", 40),
        (&key_i, "tie-1", 25),
        (&key_j, "tie-2", 25),
        (&key_i, "tie-3", 25),
    ]
    .into_iter()
    .map(|(k, e, secs)| delivery(k, &sub_l, e, plus(t0, secs)))
    .collect();
    let theirs: Vec<Delivery> = [("e15", 15), ("e50", 50)]
        .into_iter()
        .map(|(e, secs)| delivery(&key_i, &sub_m, e, plus(t0, secs)))
        .collect();
    create(store, &mine[..3]).await;
    create(store, &theirs).await;
    create(store, &mine[3..]).await;

    let list = |project: ProjectKey, sub: SubscriptionId, cursor: Option<String>, limit| async move {
        store
            .list_deliveries(&project, &sub, &page_request(cursor, limit))
            .await
            .expect("list_deliveries")
    };
    let all = list(project.clone(), sub_l.subscription_id.clone(), None, 1000).await;
    assert!(all.next.is_none(), "a page holding everything has no next");
    assert_eq!(
        sorted(listed_ids(&all.items)),
        sorted(ids(&mine)),
        "a subscription's deliveries, of every instance, and only those"
    );
    assert_eq!(
        by_id(all.items.clone()),
        by_id(mine.iter().map(Delivery::summary).collect()),
        "each listed as its summary: every field but the event, and the event's id"
    );
    let times: Vec<i64> = all.items.iter().map(|d| d.created_at.millis()).collect();
    let mut newest_first = times.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, newest_first, "newest first");
    summaries_of_stored(store, &all.items, "listed").await;
    for limit in [1, 2, 3, 7] {
        let paged = check_pages(limit, |cursor| {
            list(
                project.clone(),
                sub_l.subscription_id.clone(),
                cursor,
                limit,
            )
        })
        .await;
        assert_eq!(
            listed_ids(&paged),
            listed_ids(&all.items),
            "paging with limit {limit} lists every delivery once, in the same order (ties too)"
        );
    }

    // An attempt does not move a delivery in the list.
    assert_eq!(
        store
            .record_attempt(
                &mine[0].webhook_id,
                &attempt(1, plus(t0, 500), Some(plus(t0, 900)), false)
            )
            .await,
        Ok(true)
    );
    let after = list(project.clone(), sub_l.subscription_id.clone(), None, 1000).await;
    assert_eq!(
        listed_ids(&after.items),
        listed_ids(&all.items),
        "listed by creation, not by last attempt"
    );
    summaries_of_stored(store, &after.items, "listed after an attempt").await;
    assert!(
        after
            .items
            .iter()
            .any(|d| d.webhook_id == mine[0].webhook_id && d.attempt == 1 && d.attempts.len() == 1),
        "a listed delivery shows the attempts recorded"
    );

    let other_sub = list(project.clone(), sub_m.subscription_id.clone(), None, 1000).await;
    assert_eq!(
        listed_ids(&other_sub.items),
        vec![theirs[1].webhook_id.clone(), theirs[0].webhook_id.clone()],
        "another subscription's deliveries are its own"
    );
    let other_project = list(
        run.project("list-other"),
        sub_l.subscription_id.clone(),
        None,
        1000,
    )
    .await;
    assert!(
        other_project.items.is_empty() && other_project.next.is_none(),
        "another project sees none of the subscription's deliveries"
    );
    let unknown = list(project.clone(), run.subscription_id("none"), None, 10).await;
    assert!(unknown.items.is_empty() && unknown.next.is_none());
    for cursor in ["not-a-cursor", "", "0"] {
        let r = store
            .list_deliveries(
                &project,
                &sub_l.subscription_id,
                &page_request(Some(cursor.to_owned()), 10),
            )
            .await;
        assert!(
            matches!(r, Err(StoreError::NotFound)),
            "a cursor the store never handed out ({cursor:?}) is NotFound: {r:?}"
        );
    }
}

/// Each listed entry is the summary of the delivery stored under its webhook id.
async fn summaries_of_stored<S: DeliveryStore>(store: &S, listed: &[DeliverySummary], what: &str) {
    for d in listed {
        assert_eq!(
            get(store, &d.webhook_id)
                .await
                .map(|stored| stored.summary())
                .as_ref(),
            Some(d),
            "{what}: a listed entry is the summary of the stored delivery"
        );
    }
}

/// `overdue_deliveries`: non-final, due strictly before `before`, oldest due first.
async fn overdue<S: DeliveryStore>(store: &S, key: &InstanceKey, sub: &Subscription) {
    // Due long before anything else in a store, so that `limit` meets these first.
    let base = at("1971-02-03T04:05:06Z");
    let due = |event: &str, secs: i64| {
        let mut d = delivery(key, sub, event, base);
        d.next_attempt_at = Some(plus(base, secs));
        d
    };
    let o_a = due("evt-od-a", 1);
    let o_b = due("evt-od-b", 1000);
    let o_c = due("evt-od-c", 3);
    let o_done = due("evt-od-done", 1);
    let o_failed = due("evt-od-failed", 1);
    let o_late = due("evt-od-late", 100 * 365 * 86_400);
    create(
        store,
        &[
            o_c.clone(),
            o_late.clone(),
            o_a.clone(),
            o_done.clone(),
            o_b.clone(),
            o_failed.clone(),
        ],
    )
    .await;
    // o_b failed once and is due again at base + 2 s; two are final.
    assert_eq!(
        store
            .record_attempt(
                &o_b.webhook_id,
                &attempt(1, base, Some(plus(base, 2)), false)
            )
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .record_attempt(&o_done.webhook_id, &attempt(1, base, None, true))
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .record_attempt(&o_failed.webhook_id, &attempt(1, base, None, false))
            .await,
        Ok(true)
    );

    let mine = ids(&[
        o_a.clone(),
        o_b.clone(),
        o_c.clone(),
        o_done.clone(),
        o_failed.clone(),
        o_late.clone(),
    ]);
    let ours = |before: Timestamp, limit: usize| {
        let mine = &mine;
        async move {
            let listed = store
                .overdue_deliveries(before, limit)
                .await
                .expect("overdue_deliveries");
            assert!(listed.len() <= limit, "at most `limit` ids");
            listed
                .into_iter()
                .filter(|id| mine.contains(id))
                .collect::<Vec<String>>()
        }
    };
    assert_eq!(
        ours(plus(base, 10), 10_000).await,
        vec![
            o_a.webhook_id.clone(),
            o_b.webhook_id.clone(),
            o_c.webhook_id.clone()
        ],
        "the non-final deliveries due before the time, oldest due first (with an attempt's \
         new due time; final ones never)"
    );
    assert_eq!(
        ours(plus(base, 2), 10_000).await,
        vec![o_a.webhook_id.clone()],
        "due strictly before the time"
    );
    assert_eq!(
        ours(plus(base, 10), 2).await,
        vec![o_a.webhook_id.clone(), o_b.webhook_id.clone()],
        "the limit keeps the oldest due"
    );
    assert!(ours(base, 10_000).await.is_empty());

    assert_eq!(
        store
            .record_attempt(&o_a.webhook_id, &attempt(1, base, None, true))
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .record_attempt(
                &o_b.webhook_id,
                &attempt(2, base, Some(plus(base, 100_000)), false)
            )
            .await,
        Ok(true)
    );
    assert_eq!(
        ours(plus(base, 10), 10_000).await,
        vec![o_c.webhook_id.clone()],
        "a delivery that succeeded or was rescheduled is no longer overdue"
    );
    assert_eq!(
        ours(plus(base, 200 * 365 * 86_400), 10_000).await.len(),
        3,
        "everything not final is overdue at some point: {:?}",
        [&o_b.webhook_id, &o_c.webhook_id, &o_late.webhook_id]
    );
}

/// `postpone`: moves the due time, conditional on the old one; attempts, status and reports
/// unchanged; the delivery is overdue again only once `before` passes the new due time.
async fn postponing<S: DeliveryStore>(store: &S, key: &InstanceKey, sub: &Subscription) {
    // After the due times of `overdue`, long before anything else in a store.
    let base = at("1972-01-02T03:04:05Z");
    let due = plus(base, 5);
    let mut p = delivery(key, sub, "evt-pp", base);
    p.next_attempt_at = Some(due);
    let mut done = delivery(key, sub, "evt-pp-done", base);
    done.next_attempt_at = Some(due);
    create(store, &[p.clone(), done.clone()]).await;
    assert_eq!(
        store
            .record_attempt(&done.webhook_id, &attempt(1, base, None, true))
            .await,
        Ok(true)
    );
    let report = client_report("postponed", base);
    store
        .add_client_report(&p.webhook_id, &report)
        .await
        .expect("add_client_report");
    p.client_reports.push(report);

    let overdue_of = |before: Timestamp| {
        let id = p.webhook_id.clone();
        async move {
            store
                .overdue_deliveries(before, 10_000)
                .await
                .expect("overdue_deliveries")
                .contains(&id)
        }
    };
    assert!(overdue_of(plus(base, 10)).await);

    assert_eq!(
        store
            .postpone(&format!("{}-none", p.webhook_id), due, plus(base, 100))
            .await,
        Err(StoreError::NotFound),
        "postponing an unknown delivery is NotFound"
    );
    for other in [plus(base, 4), at("1972-01-02T03:04:10.0005Z")] {
        assert_eq!(
            store.postpone(&p.webhook_id, other, plus(base, 100)).await,
            Ok(false),
            "postponing from another due time than the stored one ({other:?}) writes nothing"
        );
    }
    assert_eq!(
        store.postpone(&done.webhook_id, due, plus(base, 100)).await,
        Ok(false),
        "a final delivery is not postponed"
    );
    assert_eq!(get(store, &p.webhook_id).await.as_ref(), Some(&p));

    // Racing postpones from the same due time: one moves it.
    let until = plus(base, 100);
    let results: Vec<StoreResult<bool>> = join_all(
        (0..4)
            .map(|_| store.postpone(&p.webhook_id, due, until))
            .collect(),
    )
    .await;
    assert_eq!(
        results.iter().filter(|r| **r == Ok(true)).count(),
        1,
        "one of concurrent postpones moves the due time: {results:?}"
    );
    assert!(
        results.iter().all(|r| r.is_ok()),
        "the others are Ok(false): {results:?}"
    );
    let mut expected = p.clone();
    expected.next_attempt_at = Some(until);
    assert_eq!(
        get(store, &p.webhook_id).await.as_ref(),
        Some(&expected),
        "postponing moves the due time only"
    );
    assert_eq!(
        store.postpone(&p.webhook_id, due, plus(base, 200)).await,
        Ok(false),
        "the old due time no longer matches"
    );
    assert!(
        !overdue_of(plus(base, 10)).await,
        "a postponed delivery is not overdue at its old due time"
    );
    assert!(!overdue_of(until).await, "due strictly before the time");
    assert!(
        overdue_of(plus(base, 101)).await,
        "overdue after the new due time"
    );

    // An attempt goes on from the postponed state.
    let u1 = attempt(1, plus(base, 101), Some(plus(base, 300)), false);
    assert_eq!(store.record_attempt(&p.webhook_id, &u1).await, Ok(true));
    u1.apply(&mut expected);
    assert_eq!(get(store, &p.webhook_id).await.as_ref(), Some(&expected));
    assert_eq!(
        store.postpone(&p.webhook_id, until, plus(base, 400)).await,
        Ok(false),
        "an attempt moved the due time"
    );
    assert!(!overdue_of(plus(base, 200)).await);
    assert_eq!(
        store
            .postpone(&p.webhook_id, plus(base, 300), plus(base, 400))
            .await,
        Ok(true)
    );
    assert!(!overdue_of(plus(base, 301)).await);
    assert!(overdue_of(plus(base, 401)).await);
    // Succeeded: no longer postponed, nor overdue.
    let u2 = attempt(2, plus(base, 401), None, true);
    assert_eq!(store.record_attempt(&p.webhook_id, &u2).await, Ok(true));
    assert_eq!(
        store
            .postpone(&p.webhook_id, plus(base, 400), plus(base, 500))
            .await,
        Ok(false)
    );
    assert!(!overdue_of(plus(base, 10_000)).await);
}
