//! The delivery state machine (`pricing_core::webhooks::deliver`) on the embedded store
//! with a scripted transport and a moving clock: the full retry schedule to the final
//! failure, Retry-After, 410, a deleted subscription, early wake-ups and duplicate
//! messages.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use pricing_core::ids::{InstanceId, InstanceKey, ProjectId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::Event;
use pricing_core::ports::{
    DeliveryStore, InstanceStore, SubscriptionStore, WebhookRequest, WebhookTransport,
};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::delivery::Response;
use pricing_core::webhooks::{
    CallbackPolicy, Delivery, DeliveryStatus, NewSubscription, RETRY_DELAYS, Settle, Subscription,
    SubscriptionStatus, deliver,
};
use pricing_embedded::EmbeddedStore;
use serde_json::json;

/// Answers from a script and records every request.
#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<Response>>,
    requests: Mutex<Vec<WebhookRequest>>,
}

impl Scripted {
    fn answer(&self, r: Response) {
        self.answers.lock().unwrap().push_back(r);
    }
    fn sent(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

impl WebhookTransport for Scripted {
    async fn post(&self, request: WebhookRequest) -> Response {
        self.requests.lock().unwrap().push(request);
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Response::Error("no scripted answer".into()))
    }
}

fn status(s: u16) -> Response {
    Response::Status {
        status: s,
        retry_after: None,
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: EmbeddedStore,
    signer: Signer,
    subscription: Subscription,
    t0: Timestamp,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("db")).unwrap();
    let t0 = Timestamp::parse("2026-05-01T12:00:00Z").unwrap();
    let subscription = NewSubscription::parse(
        &json!({"callbackUrl": "https://hooks.example.com/in?x=1"}),
        &CallbackPolicy::STRICT,
    )
    .unwrap()
    .into_subscription(project_p(), None, t0);
    assert!(store.create_subscription(&subscription, 20).await.unwrap());
    let signer = Signer::from_keys(&[StoredKey::generate("k".into(), t0).unwrap()]).unwrap();
    Fixture {
        _dir: dir,
        store,
        signer,
        subscription,
        t0,
    }
}

impl Fixture {
    async fn delivery(&self, n: u32) -> String {
        let event = self.event(&format!("evt_{n}"), "prices.updated", json!({"prices": []}));
        let d = Delivery::new(&event, &self.subscription, self.t0);
        let created = self.store.create_deliveries(&[d]).await.unwrap();
        assert_eq!(created.len(), 1);
        created[0].clone()
    }

    /// An event of instance `i` of project `p`, made at `t0`.
    fn event(&self, id: &str, kind: &str, data: serde_json::Value) -> Event {
        Event {
            id: id.into(),
            event_type: kind.into(),
            project_id: ProjectId::parse("p").unwrap(),
            instance_id: InstanceId::parse("i").unwrap(),
            created_at: self.t0,
            data,
        }
    }

    /// Creates instance `i` of project `p` and returns its key.
    async fn instance_i(&self) -> InstanceKey {
        self.instance("i").await;
        InstanceKey::new(
            project_p().tenant,
            ProjectId::parse("p").unwrap(),
            InstanceId::parse("i").unwrap(),
        )
    }

    /// Creates instance `id` of project `p` (inactive, no state).
    async fn instance(&self, id: &str) {
        let instance = pricing_core::model::Instance {
            tenant: project_p().tenant,
            project_id: ProjectId::parse("p").unwrap(),
            instance_id: InstanceId::parse(id).unwrap(),
            name: String::new(),
            active: false,
            time_zone: None,
            deactivation_date: None,
            created_at: self.t0,
            updated_at: self.t0,
            deactivation_announced: Some(false),
        };
        self.store
            .create_instance(&instance, &pricing_core::state::Header::default())
            .await
            .unwrap();
    }

    /// Up to 10 messages of the webhook lane (received, hidden for 30 s).
    async fn webhook_lane(&self) -> Vec<pricing_core::ports::Received> {
        use pricing_core::ports::WorkQueue;
        self.store
            .webhook_queue()
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
    }

    fn at(&self, after: Duration) -> Timestamp {
        Timestamp::from_millis(self.t0.millis() + i64::try_from(after.as_millis()).unwrap())
            .unwrap()
    }
}

/// Project `p` of the tests' tenant.
fn project_p() -> pricing_core::ids::ProjectKey {
    pricing_core::ids::ProjectKey::new(
        pricing_core::ids::TenantId::from_claim("acme").unwrap(),
        ProjectId::parse("p").unwrap(),
    )
}
#[tokio::test]
async fn every_attempt_fails_then_the_last_is_dead_lettered() {
    let f = fixture().await;
    let id = f.delivery(1).await;
    let transport = Scripted::default();
    let mut clock = Duration::ZERO;
    for attempt in 1..=8u32 {
        transport.answer(status(500));
        let settle = deliver(&f.store, &transport, &f.signer, &id, f.at(clock))
            .await
            .unwrap();
        let d = f.store.get_delivery(&id).await.unwrap().unwrap();
        assert_eq!(d.attempt, attempt);
        assert_eq!(d.response_status, Some(500));
        if attempt < 8 {
            let Settle::RetryIn(delay) = settle else {
                panic!("attempt {attempt}: {settle:?}")
            };
            let base = RETRY_DELAYS[attempt as usize - 1];
            assert!(delay >= base.mul_f64(0.89) && delay <= base.mul_f64(1.11));
            assert_eq!(d.status, DeliveryStatus::Retrying);
            // A wake-up before the retry is due sends nothing and waits the rest.
            let early = deliver(&f.store, &transport, &f.signer, &id, f.at(clock))
                .await
                .unwrap();
            assert!(matches!(early, Settle::RetryIn(_)), "{early:?}");
            assert_eq!(transport.sent(), attempt as usize);
            clock += delay;
        } else {
            assert_eq!(settle, Settle::DeadLetter);
            assert_eq!(d.status, DeliveryStatus::Failed);
            assert_eq!(d.attempts.len(), 8);
            assert_eq!(d.next_attempt_at, None);
        }
    }
    // Redelivered after the final failure: dead-lettered again, nothing sent.
    let again = deliver(&f.store, &transport, &f.signer, &id, f.at(clock))
        .await
        .unwrap();
    assert_eq!(again, Settle::DeadLetter);
    assert_eq!(transport.sent(), 8);
    let first = &transport.requests.lock().unwrap()[0];
    let header = |name: &str| {
        first
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(header("webhook-id"), id);
    assert_eq!(first.url, "https://hooks.example.com/in?x=1");
}

#[tokio::test]
async fn a_longer_retry_after_sets_the_delay_and_success_ends_it() {
    let f = fixture().await;
    let id = f.delivery(2).await;
    let transport = Scripted::default();
    transport.answer(Response::Status {
        status: 429,
        retry_after: Some("42".into()),
    });
    let settle = deliver(&f.store, &transport, &f.signer, &id, f.t0)
        .await
        .unwrap();
    assert_eq!(settle, Settle::RetryIn(Duration::from_secs(42)));
    transport.answer(status(204));
    let settle = deliver(
        &f.store,
        &transport,
        &f.signer,
        &id,
        f.at(Duration::from_secs(42)),
    )
    .await
    .unwrap();
    assert_eq!(settle, Settle::Done);
    let d = f.store.get_delivery(&id).await.unwrap().unwrap();
    assert_eq!((d.status, d.attempt), (DeliveryStatus::Succeeded, 2));
    // A duplicate message after success sends nothing.
    let dup = deliver(
        &f.store,
        &transport,
        &f.signer,
        &id,
        f.at(Duration::from_secs(50)),
    )
    .await
    .unwrap();
    assert_eq!(dup, Settle::Done);
    assert_eq!(transport.sent(), 2);
}

#[tokio::test]
async fn gone_disables_the_subscription_and_fails_its_other_deliveries() {
    let f = fixture().await;
    let first = f.delivery(3).await;
    let second = f.delivery(4).await;
    let transport = Scripted::default();
    transport.answer(status(410));
    let settle = deliver(&f.store, &transport, &f.signer, &first, f.t0)
        .await
        .unwrap();
    assert_eq!(settle, Settle::DeadLetter);
    let sub = f
        .store
        .get_subscription(&f.subscription.project(), &f.subscription.subscription_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sub.status, SubscriptionStatus::Disabled);
    // The other delivery fails without a request.
    let settle = deliver(&f.store, &transport, &f.signer, &second, f.t0)
        .await
        .unwrap();
    assert_eq!(settle, Settle::Done);
    let d = f.store.get_delivery(&second).await.unwrap().unwrap();
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert_eq!(d.error.as_deref(), Some("the subscription is disabled"));
    assert_eq!(transport.sent(), 1);
}

#[tokio::test]
async fn a_deleted_subscription_gets_nothing() {
    let f = fixture().await;
    let id = f.delivery(5).await;
    assert!(
        f.store
            .delete_subscription(&f.subscription.project(), &f.subscription.subscription_id)
            .await
            .unwrap()
    );
    let transport = Scripted::default();
    let settle = deliver(&f.store, &transport, &f.signer, &id, f.t0)
        .await
        .unwrap();
    assert_eq!(settle, Settle::Done);
    assert_eq!(transport.sent(), 0);
    let d = f.store.get_delivery(&id).await.unwrap().unwrap();
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert_eq!(
        f.store.get_delivery("wh_missing").await.unwrap(),
        None,
        "unknown ids are no deliveries"
    );
}

#[tokio::test]
async fn a_project_trigger_fans_out_per_instance_and_scope_is_kept() {
    use pricing_core::ids::SubscriptionId;
    use pricing_core::model::Message;
    use pricing_core::ports::WorkQueue;
    use pricing_core::webhooks::manual_trigger;

    let f = fixture().await;
    let project = project_p();
    for id in ["i1", "i2", "i3"] {
        f.instance(id).await;
    }
    let sub: &SubscriptionId = &f.subscription.subscription_id;
    // Project level, no instance: one trigger message per instance, nothing sent yet.
    let report = manual_trigger(&f.store, &f.store, &project, sub, "trg_1", None, None, f.t0)
        .await
        .unwrap();
    assert_eq!((report.fanned_out, report.deliveries), (3, 0));
    let queue = f.store.webhook_queue();
    let got = queue.receive(10, Duration::from_secs(30)).await.unwrap();
    let mut instances: Vec<String> = got
        .iter()
        .map(|r| match &r.message {
            Message::Trigger {
                instance_id: Some(i),
                trigger_id,
                ..
            } if trigger_id == "trg_1" => i.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    instances.sort();
    assert_eq!(instances, ["i1", "i2", "i3"]);
    // One instance without prices yet: nothing to resend.
    let one = InstanceId::parse("i1").unwrap();
    let report = manual_trigger(
        &f.store,
        &f.store,
        &project,
        sub,
        "trg_1",
        Some(&one),
        None,
        f.t0,
    )
    .await
    .unwrap();
    assert_eq!(report, Default::default());

    // An instance-level subscription resends only its own instance.
    let own = NewSubscription::parse(
        &json!({"callbackUrl": "https://hooks.example.com/i2"}),
        &CallbackPolicy::STRICT,
    )
    .unwrap()
    .into_subscription(
        project.clone(),
        Some(InstanceId::parse("i2").unwrap()),
        f.t0,
    );
    assert!(f.store.create_subscription(&own, 20).await.unwrap());
    let report = manual_trigger(
        &f.store,
        &f.store,
        &project,
        &own.subscription_id,
        "trg_2",
        Some(&one),
        None,
        f.t0,
    )
    .await
    .unwrap();
    assert_eq!(report, Default::default(), "i1 is outside its scope");
    let report = manual_trigger(
        &f.store,
        &f.store,
        &project,
        &own.subscription_id,
        "trg_2",
        None,
        None,
        f.t0,
    )
    .await
    .unwrap();
    assert_eq!(report.fanned_out, 0, "no fan-out below project level");
}

#[tokio::test]
async fn the_sweep_wakes_undispatched_events_and_lost_deliveries() {
    use pricing_core::model::Message;
    use pricing_core::ports::{EventStore, WorkQueue};
    use pricing_core::webhooks::{OVERDUE_GRACE, sweep};

    let f = fixture().await;
    let id = f.delivery(9).await;
    // Not overdue yet: nothing.
    let early = sweep(&f.store, &f.store, f.at(OVERDUE_GRACE / 2), 100)
        .await
        .unwrap();
    assert_eq!((early.instances, early.deliveries), (0, 0));
    let late = sweep(&f.store, &f.store, f.at(OVERDUE_GRACE * 2), 100)
        .await
        .unwrap();
    assert_eq!(late.deliveries, 1);
    let got = f.webhook_lane().await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].message,
        Message::Deliver {
            webhook_id: id.clone()
        }
    );
    // Re-enqueued now: due now, not overdue again before now + grace.
    let until = f.at(OVERDUE_GRACE * 2);
    let stored = f.store.get_delivery(&id).await.unwrap().unwrap();
    assert_eq!(stored.next_attempt_at, Some(until));
    assert_eq!((stored.attempt, stored.attempts.len()), (0, 0));
    let again = sweep(&f.store, &f.store, until, 100).await.unwrap();
    assert_eq!(
        again.deliveries, 0,
        "a second sweep at the same time sends nothing"
    );
    let within = sweep(&f.store, &f.store, f.at(OVERDUE_GRACE * 3), 100)
        .await
        .unwrap();
    assert_eq!(within.deliveries, 0, "nor one a grace period later");
    let after = f.at(OVERDUE_GRACE * 3 + Duration::from_secs(1));
    let later = sweep(&f.store, &f.store, after, 100).await.unwrap();
    assert_eq!(
        later.deliveries, 1,
        "still lost after the grace: sent again"
    );
    let stored = f.store.get_delivery(&id).await.unwrap().unwrap();
    assert_eq!(stored.next_attempt_at, Some(after));
    // Done with the first message (its group is free again): the sweeps sent one more.
    f.store.webhook_queue().ack(&got[0].receipt).await.unwrap();
    let mut sent = Vec::new();
    for r in f
        .store
        .webhook_queue()
        .receive(10, Duration::from_secs(30))
        .await
        .unwrap()
    {
        sent.push(r.message);
    }
    assert_eq!(sent, [Message::Deliver { webhook_id: id }]);

    // An event stored but never dispatched wakes its instance's processor.
    let key = f.instance_i().await;
    let event = f.event("evt_lonely", "instance.deactivated", json!({}));
    f.store.append_events(&key, &[event]).await.unwrap();
    let report = sweep(&f.store, &f.store, f.t0, 100).await.unwrap();
    assert_eq!(report.instances, 1);
    let work = f.store.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(work[0].message, Message::ProcessInstance { key });
}

#[tokio::test]
async fn a_large_project_trigger_goes_on_page_by_page() {
    use pricing_core::model::Message;
    use pricing_core::ports::WorkQueue;
    use pricing_core::webhooks::manual_trigger;
    use pricing_core::webhooks::trigger::TRIGGER_PAGE;

    let f = fixture().await;
    let project = project_p();
    for n in 0..=TRIGGER_PAGE {
        f.instance(&format!("i{n:04}")).await;
    }
    let sub = &f.subscription.subscription_id;
    let first = manual_trigger(&f.store, &f.store, &project, sub, "trg", None, None, f.t0)
        .await
        .unwrap();
    assert_eq!(first.fanned_out, TRIGGER_PAGE);
    let queue = f.store.webhook_queue();
    let mut next_page = None;
    loop {
        let got = queue.receive(64, Duration::from_secs(30)).await.unwrap();
        if got.is_empty() {
            break;
        }
        for r in got {
            if let Message::Trigger {
                instance_id: None,
                cursor: Some(c),
                ..
            } = &r.message
            {
                next_page = Some(c.clone());
            }
            queue.ack(&r.receipt).await.unwrap();
        }
    }
    let cursor = next_page.expect("the next page is a message of its own");
    let rest = manual_trigger(
        &f.store,
        &f.store,
        &project,
        sub,
        "trg",
        None,
        Some(&cursor),
        f.t0,
    )
    .await
    .unwrap();
    assert_eq!(rest.fanned_out, 1, "the last instance, and no further page");
    let got = queue.receive(64, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(matches!(
        &got[0].message,
        Message::Trigger { instance_id: Some(i), .. } if i.as_str() == "i0500"
    ));
}

#[tokio::test]
async fn a_trigger_resends_rejections_whose_delivery_failed_once_per_trigger() {
    use pricing_core::ports::EventStore;
    use pricing_core::webhooks::manual_trigger;
    use pricing_core::webhooks::trigger::resent_event_id;

    let f = fixture().await;
    let key = f.instance_i().await;
    let (project, i) = (project_p(), key.instance_id.clone());
    let event = |id: &str, kind: &str| {
        f.event(
            id,
            kind,
            json!({"errors": [{"transactionId": id, "code": "unknownItem"}]}),
        )
    };
    // lost: its delivery failed for good; late: still retrying; old: before the
    // subscription (no delivery); price: a failed prices.updated (prices are resent from
    // the latest calculation, not from events).
    let lost = event("evt_lost", "entries.rejected");
    let late = event("evt_late", "entries.rejected");
    let old = event("evt_old", "entries.rejected");
    let price = event("evt_price", "prices.updated");
    f.store
        .append_events(
            &key,
            &[lost.clone(), late.clone(), old.clone(), price.clone()],
        )
        .await
        .unwrap();
    let delivery = |e: &Event, status: DeliveryStatus| Delivery {
        status,
        ..Delivery::new(e, &f.subscription, f.t0)
    };
    f.store
        .create_deliveries(&[
            delivery(&lost, DeliveryStatus::Failed),
            delivery(&late, DeliveryStatus::Retrying),
            delivery(&price, DeliveryStatus::Failed),
        ])
        .await
        .unwrap();

    let sub = &f.subscription.subscription_id;
    let trigger = |id: &'static str| {
        manual_trigger(&f.store, &f.store, &project, sub, id, Some(&i), None, f.t0)
    };
    let report = trigger("trg_1").await.unwrap();
    assert_eq!((report.rejections, report.deliveries), (1, 1), "{report:?}");
    let resent_id = resent_event_id("trg_1", &lost);
    let resent = f
        .store
        .get_delivery(&pricing_core::webhooks::webhook_id(&resent_id, sub))
        .await
        .unwrap()
        .expect("the lost rejection is a new delivery");
    assert_eq!(resent.event.event_type, "entries.rejected");
    assert_eq!(resent.event.data, lost.data, "the same rejection, resent");
    assert_eq!(resent.status, DeliveryStatus::Pending);

    // The same trigger again (a redelivered message) creates nothing new; another
    // trigger resends it once more.
    assert_eq!(trigger("trg_1").await.unwrap().rejections, 0);
    assert_eq!(trigger("trg_2").await.unwrap().rejections, 1);

    // A subscription that does not take entries.rejected gets none of them.
    let prices_only = NewSubscription::parse(
        &json!({"callbackUrl": "https://hooks.example.com/p", "events": ["prices.updated"]}),
        &CallbackPolicy::STRICT,
    )
    .unwrap()
    .into_subscription(project.clone(), None, f.t0);
    assert!(f.store.create_subscription(&prices_only, 20).await.unwrap());
    f.store
        .create_deliveries(&[Delivery {
            status: DeliveryStatus::Failed,
            ..Delivery::new(&lost, &prices_only, f.t0)
        }])
        .await
        .unwrap();
    let report = manual_trigger(
        &f.store,
        &f.store,
        &project,
        &prices_only.subscription_id,
        "trg_3",
        Some(&i),
        None,
        f.t0,
    )
    .await
    .unwrap();
    assert_eq!(report.rejections, 0);
}

/// A trigger message retried after its first try stored its deliveries and stopped before
/// it sent them (a crash) sends them: they waited for the sweep's grace period.
#[tokio::test]
async fn a_retried_trigger_sends_what_its_first_try_stored_and_never_sent() {
    use pricing_core::model::Message;
    use pricing_core::ports::{EventStore, WorkQueue};
    use pricing_core::webhooks::manual_trigger;
    use pricing_core::webhooks::trigger::resent_event_id;

    let f = fixture().await;
    let key = f.instance_i().await;
    let (project, i) = (project_p(), key.instance_id.clone());
    let lost = f.event(
        "evt_lost",
        "entries.rejected",
        json!({"errors": [{"transactionId": "t", "code": "unknownItem"}]}),
    );
    f.store
        .append_events(&key, std::slice::from_ref(&lost))
        .await
        .unwrap();
    f.store
        .create_deliveries(&[Delivery {
            status: DeliveryStatus::Failed,
            ..Delivery::new(&lost, &f.subscription, f.t0)
        }])
        .await
        .unwrap();
    // The first try of trg_1 stored the resent delivery, then stopped.
    let resent = Event {
        id: resent_event_id("trg_1", &lost),
        ..lost.clone()
    };
    let stored = Delivery::new(&resent, &f.subscription, f.t0);
    f.store
        .create_deliveries(std::slice::from_ref(&stored))
        .await
        .unwrap();
    let queue = f.store.webhook_queue();
    assert!(
        queue
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );

    let sub = &f.subscription.subscription_id;
    let report = manual_trigger(
        &f.store,
        &f.store,
        &project,
        sub,
        "trg_1",
        Some(&i),
        None,
        f.t0,
    )
    .await
    .unwrap();
    assert_eq!(
        (report.rejections, report.resent),
        (0, 1),
        "nothing new was created; the stored one was sent"
    );
    let sent: Vec<Message> = queue
        .receive(10, Duration::from_secs(30))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.message)
        .collect();
    assert_eq!(
        sent,
        [Message::Deliver {
            webhook_id: stored.webhook_id.clone()
        }]
    );
}

/// A dispatch whose create was applied but whose answer was lost (the retry finds the
/// delivery stored) still sends it, and a dispatch finds an attempted delivery sent.
#[tokio::test]
async fn a_dispatch_sends_what_an_earlier_create_stored_and_never_sent() {
    use pricing_core::model::Message;
    use pricing_core::ports::EventStore;
    use pricing_core::webhooks::dispatch;

    let f = fixture().await;
    let key = f.instance_i().await;
    let event = |id: &str| f.event(id, "prices.updated", json!({"prices": []}));
    let (lost, sent) = (event("evt_lost"), event("evt_sent"));
    f.store
        .append_events(&key, &[lost.clone(), sent.clone()])
        .await
        .unwrap();
    // Both were created by an earlier run; the second was attempted since.
    let stored: Vec<Delivery> = [&lost, &sent]
        .iter()
        .map(|e| Delivery::new(e, &f.subscription, f.t0))
        .collect();
    assert_eq!(f.store.create_deliveries(&stored).await.unwrap().len(), 2);
    let transport = Scripted::default();
    transport.answer(status(200));
    let settle = deliver(&f.store, &transport, &f.signer, &stored[1].webhook_id, f.t0)
        .await
        .unwrap();
    assert_eq!(settle, Settle::Done);

    let report = dispatch(&f.store, &f.store, &key, f.t0).await.unwrap();
    assert_eq!((report.events, report.deliveries), (2, 0), "none created");
    let got = f.webhook_lane().await;
    let messages: Vec<Message> = got.into_iter().map(|r| r.message).collect();
    assert_eq!(
        messages,
        [Message::Deliver {
            webhook_id: stored[0].webhook_id.clone()
        }],
        "the unsent one is sent, the delivered one is not"
    );
    assert!(
        f.store
            .undispatched_events(&key, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Answers 500 after a while, as a receiver that takes its time.
struct Slow(Duration);

impl WebhookTransport for Slow {
    async fn post(&self, _request: WebhookRequest) -> Response {
        tokio::time::sleep(self.0).await;
        status(500)
    }
}

/// The retry of an attempt that took long (a receiver timing out takes 15 s) is due its
/// delay after the attempt ended, in the record and in the wait (found by an outside
/// review: `nextAttemptAt` was counted from the attempt's start, before it even ended).
#[tokio::test]
async fn a_slow_attempts_retry_counts_from_its_end() {
    let f = fixture().await;
    let id = f.delivery(3).await;
    let took = Duration::from_millis(1_200);
    let settle = deliver(&f.store, &Slow(took), &f.signer, &id, f.t0)
        .await
        .unwrap();
    let Settle::RetryIn(delay) = settle else {
        panic!("{settle:?}")
    };
    let base = RETRY_DELAYS[0];
    assert!(
        delay >= base.mul_f64(0.89) && delay <= base.mul_f64(1.11),
        "{delay:?}"
    );
    let d = f.store.get_delivery(&id).await.unwrap().unwrap();
    let due = d.next_attempt_at.expect("a retry is due");
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap();
    assert!(
        due.millis() >= f.t0.millis() + ms(took) + ms(delay),
        "due {} ms after the start; the attempt took {took:?}, the delay {delay:?}",
        due.millis() - f.t0.millis()
    );
    assert_eq!(
        d.attempts[0].attempted_at, f.t0,
        "an attempt is dated by its start"
    );
}

/// Holds each attempt until released, answering 204; its destination has one place.
struct Held {
    places: std::sync::Arc<pricing_core::webhooks::DestinationPlaces>,
    release: tokio::sync::Notify,
}

impl WebhookTransport for Held {
    async fn post(&self, _request: WebhookRequest) -> Response {
        self.release.notified().await;
        status(204)
    }

    fn take_place(&self, destination: &str, tenant: &str) -> Option<pricing_core::webhooks::Place> {
        self.places.take(destination, tenant)
    }
}

/// A slow destination whose places are all taken (a receiver that hangs) is not attempted:
/// the delivery waits 20 to 40 s and the attempt does not count, so the pool's places go to
/// other destinations (found by an outside probe: one tenant's hung receiver delayed every
/// other tenant's webhooks by 15 s to 12 minutes).
#[tokio::test]
async fn a_destination_without_a_free_place_is_not_attempted_and_nothing_counts() {
    let f = fixture().await;
    let (first, second) = (f.delivery(4).await, f.delivery(5).await);
    let held = Held {
        // Every attempt in flight counts as slow (the real threshold is 5 s).
        places: pricing_core::webhooks::DestinationPlaces::slow_after(1, Duration::ZERO),
        release: tokio::sync::Notify::new(),
    };
    let attempt = deliver(&f.store, &held, &f.signer, &first, f.t0);
    let blocked = async {
        // The first attempt holds the destination's only place meanwhile.
        while held.places.in_flight("https://hooks.example.com") == 0 {
            tokio::task::yield_now().await;
        }
        let settle = tokio::time::timeout(
            Duration::from_secs(5),
            deliver(&f.store, &held, &f.signer, &second, f.t0),
        )
        .await
        .expect("not attempted: it would wait for a release that comes after")
        .unwrap();
        held.release.notify_one();
        settle
    };
    let (done, blocked) = tokio::join!(attempt, blocked);
    assert_eq!(done.unwrap(), Settle::Done);
    let Settle::RetryIn(wait) = blocked else {
        panic!("{blocked:?}")
    };
    assert!((20..=40).contains(&wait.as_secs()), "{wait:?}");
    let waiting = f.store.get_delivery(&second).await.unwrap().unwrap();
    assert_eq!(waiting.attempt, 0, "no attempt was counted");
    assert!(waiting.attempts.is_empty());
    assert_eq!(held.places.in_flight("https://hooks.example.com"), 0);
    // With its place free again it is attempted.
    held.release.notify_one();
    let settle = deliver(&f.store, &held, &f.signer, &second, f.t0)
        .await
        .unwrap();
    assert_eq!(settle, Settle::Done);
}
