use pricing_core::ids::{ProjectKey, SubscriptionId};
use pricing_core::ports::{StoreError, StoreResult, SubscriptionStore};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{
    ROTATION_GRACE, Subscription, SubscriptionSecrets, SubscriptionStatus, WebhookSecret,
};

use crate::fixtures::{Run, at, instance_id, plus, subscription};
use crate::join_all;

async fn list<S: SubscriptionStore>(
    store: &S,
    project: &ProjectKey,
    instance: Option<&str>,
) -> Vec<Subscription> {
    let instance = instance.map(instance_id);
    store
        .list_subscriptions(project, instance.as_ref())
        .await
        .expect("list_subscriptions")
}

async fn get<S: SubscriptionStore>(
    store: &S,
    project: &ProjectKey,
    id: &SubscriptionId,
) -> Option<Subscription> {
    store
        .get_subscription(project, id)
        .await
        .expect("get_subscription")
}

async fn create<S: SubscriptionStore>(store: &S, s: &Subscription, max: usize) -> bool {
    store
        .create_subscription(s, max)
        .await
        .expect("create_subscription")
}

/// SubscriptionStore: subscriptions stored whole and read back by (project, id); listed
/// per scope (a project's project-level subscriptions, or one instance's), oldest first,
/// the scopes separate; a scope holding `max` refuses another with `Ok(false)` and writes
/// nothing, also when creators race for the last places (never more than `max` stored);
/// `delete_subscription` says whether there was one; `set_subscription_status` records
/// the status with when and why (`NotFound` when missing); another project never sees,
/// deletes or changes a subscription. The signing secrets are stored with the
/// subscription and read back with it; see [`secrets`] for their rotation.
pub async fn subscription_store_contract<S: SubscriptionStore>(store: &S) {
    let run = Run::new("subscriptions");
    let project = run.project("p");
    let t0 = at("2026-04-05T06:07:08.009Z");
    // Ids sort like creation times, as generated ULIDs do.
    let sub = |name: &str, instance: Option<&str>, secs: i64| {
        subscription(
            run.subscription_id(name),
            &project,
            instance,
            plus(t0, secs),
        )
    };

    assert!(
        list(store, &project, None).await.is_empty(),
        "a project without subscriptions lists none"
    );
    assert!(list(store, &project, Some("a")).await.is_empty());
    assert_eq!(
        get(store, &project, &run.subscription_id("s-none")).await,
        None,
        "an unknown subscription is None"
    );

    // Project level and instance level, created in order.
    let s1 = sub("s1", None, 1);
    let s2 = sub("s2", None, 2);
    let s3 = sub("s3", None, 3);
    let t1 = sub("t1", Some("a"), 4);
    let t2 = sub("t2", Some("a"), 5);
    let u1 = sub("u1", Some("b"), 6);
    for s in [&s1, &t1, &s2, &u1, &t2, &s3] {
        assert!(
            create(store, s, 3).await,
            "a scope with room stores the subscription ({})",
            s.subscription_id
        );
    }
    for s in [&s1, &s2, &s3, &t1, &t2, &u1] {
        assert_eq!(
            get(store, &project, &s.subscription_id).await.as_ref(),
            Some(s),
            "a subscription reads back whole, either level"
        );
    }
    assert_eq!(
        list(store, &project, None).await,
        vec![s1.clone(), s2.clone(), s3.clone()],
        "project level: the project-level subscriptions only, oldest first"
    );
    assert_eq!(
        list(store, &project, Some("a")).await,
        vec![t1.clone(), t2.clone()],
        "instance level: that instance's subscriptions only, oldest first"
    );
    assert_eq!(list(store, &project, Some("b")).await, vec![u1.clone()]);
    assert!(list(store, &project, Some("c")).await.is_empty());

    // The limit per scope.
    let s4 = sub("s4", None, 7);
    assert!(
        !create(store, &s4, 3).await,
        "a full scope refuses another subscription with Ok(false)"
    );
    assert_eq!(
        get(store, &project, &s4.subscription_id).await,
        None,
        "a refused subscription is not stored"
    );
    assert_eq!(
        list(store, &project, None).await,
        vec![s1.clone(), s2.clone(), s3.clone()],
        "a refused create writes nothing"
    );
    let t3 = sub("t3", Some("a"), 8);
    assert!(
        !create(store, &t3, 2).await,
        "an instance scope holding max refuses"
    );
    assert!(
        create(store, &t3, 3).await,
        "instance-level subscriptions do not count against the project level (and the other \
         way round)"
    );
    let c1 = sub("c1", Some("c"), 9);
    assert!(
        create(store, &c1, 1).await,
        "an empty instance scope has room for one, whatever other scopes hold"
    );
    assert_eq!(
        list(store, &project, Some("a")).await,
        vec![t1.clone(), t2.clone(), t3.clone()]
    );

    // Delete.
    assert_eq!(
        store
            .delete_subscription(&project, &s2.subscription_id)
            .await,
        Ok(true),
        "deleting a stored subscription is true"
    );
    assert_eq!(get(store, &project, &s2.subscription_id).await, None);
    assert_eq!(
        store
            .delete_subscription(&project, &s2.subscription_id)
            .await,
        Ok(false),
        "deleting it again is false"
    );
    assert_eq!(
        list(store, &project, None).await,
        vec![s1.clone(), s3.clone()]
    );
    assert!(
        create(store, &s4, 3).await,
        "a deleted subscription frees its place"
    );
    assert_eq!(
        list(store, &project, None).await,
        vec![s1.clone(), s3.clone(), s4.clone()]
    );
    assert_eq!(
        store
            .delete_subscription(&project, &t1.subscription_id)
            .await,
        Ok(true),
        "instance-level subscriptions are deleted by (project, id) too"
    );
    assert_eq!(
        list(store, &project, Some("a")).await,
        vec![t2.clone(), t3.clone()]
    );

    // Status.
    let when = plus(t0, 100);
    store
        .set_subscription_status(
            &project,
            &s3.subscription_id,
            SubscriptionStatus::Disabled,
            when,
            Some("the receiver answered 410 Gone"),
        )
        .await
        .expect("set_subscription_status");
    let mut disabled = s3.clone();
    disabled.status = SubscriptionStatus::Disabled;
    disabled.disabled_at = Some(when);
    disabled.disabled_reason = Some("the receiver answered 410 Gone".into());
    assert_eq!(
        get(store, &project, &s3.subscription_id).await.as_ref(),
        Some(&disabled),
        "disabling records the status, when and why, and changes nothing else"
    );
    assert_eq!(
        list(store, &project, None).await,
        vec![s1.clone(), disabled.clone(), s4.clone()],
        "a status change keeps the subscription's place"
    );
    store
        .set_subscription_status(
            &project,
            &t2.subscription_id,
            SubscriptionStatus::Disabled,
            when,
            None,
        )
        .await
        .expect("set_subscription_status of an instance-level subscription");
    let t2_now = get(store, &project, &t2.subscription_id)
        .await
        .expect("still stored");
    assert_eq!(t2_now.status, SubscriptionStatus::Disabled);
    assert_eq!(t2_now.disabled_at, Some(when));
    store
        .set_subscription_status(
            &project,
            &t2.subscription_id,
            SubscriptionStatus::Active,
            plus(when, 1),
            None,
        )
        .await
        .expect("set_subscription_status back to active");
    assert_eq!(
        get(store, &project, &t2.subscription_id)
            .await
            .map(|s| s.status),
        Some(SubscriptionStatus::Active)
    );
    assert_eq!(
        store
            .set_subscription_status(
                &project,
                &s2.subscription_id,
                SubscriptionStatus::Disabled,
                when,
                None,
            )
            .await,
        Err(StoreError::NotFound),
        "setting the status of a deleted subscription is NotFound (and creates nothing)"
    );
    assert_eq!(get(store, &project, &s2.subscription_id).await, None);

    // Another project (of the same or another tenant) sees none of it.
    let other = run.project("q");
    assert!(list(store, &other, None).await.is_empty());
    assert!(
        list(store, &other, Some("a")).await.is_empty(),
        "the same instance id in another project is another scope"
    );
    assert_eq!(
        get(store, &other, &s1.subscription_id).await,
        None,
        "another project's subscription id is not found"
    );
    assert_eq!(
        store.delete_subscription(&other, &s1.subscription_id).await,
        Ok(false),
        "another project cannot delete it"
    );
    assert_eq!(
        store
            .set_subscription_status(
                &other,
                &s1.subscription_id,
                SubscriptionStatus::Disabled,
                when,
                None,
            )
            .await,
        Err(StoreError::NotFound),
        "another project cannot change it"
    );
    assert_eq!(
        get(store, &project, &s1.subscription_id).await.as_ref(),
        Some(&s1),
        "untouched by the other project's calls"
    );
    let q1 = subscription(run.subscription_id("q1"), &other, None, plus(t0, 1));
    assert!(
        create(store, &q1, 1).await,
        "another project's scope has room of its own"
    );
    assert_eq!(list(store, &other, None).await, vec![q1]);
    assert_eq!(
        list(store, &project, None).await,
        vec![s1, disabled, s4],
        "and its subscriptions stay its own"
    );

    race(store, &run, t0).await;
    secrets(store, &run, t0).await;
}

async fn rotate<S: SubscriptionStore>(
    store: &S,
    s: &Subscription,
    secret: &WebhookSecret,
    at: Timestamp,
) -> SubscriptionSecrets {
    store
        .rotate_subscription_secret(&s.project(), &s.subscription_id, secret, at)
        .await
        .expect("rotate_subscription_secret")
}

/// Signing secrets: stored at creation and read back by get and list (a subscription from
/// before secrets has none); `rotate_subscription_secret` stores and returns the rotated
/// secrets (the replaced one kept for [`ROTATION_GRACE`]), gives a subscription without
/// secrets its first, and is `NotFound` for a missing, deleted or other project's
/// subscription; status changes and rotations do not undo each other, also when they race,
/// and racing rotations land one after the other.
async fn secrets<S: SubscriptionStore>(store: &S, run: &Run, t0: Timestamp) {
    let project = run.project("secrets");
    let sub = |name: &str, secs: i64| {
        subscription(run.subscription_id(name), &project, None, plus(t0, secs))
    };
    let a = sub("secret-a", 1);
    let mut legacy = sub("secret-legacy", 2);
    legacy.secrets = None;
    assert!(create(store, &a, 20).await);
    assert!(create(store, &legacy, 20).await);
    let a_secrets = a.secrets.clone().expect("the fixture has secrets");
    assert_eq!(
        get(store, &project, &a.subscription_id)
            .await
            .and_then(|s| s.secrets),
        Some(a_secrets.clone()),
        "the secret is stored at creation"
    );
    assert_eq!(
        get(store, &project, &legacy.subscription_id).await,
        Some(legacy.clone()),
        "a subscription without secrets reads back without"
    );
    assert_eq!(
        list(store, &project, None).await,
        vec![a.clone(), legacy.clone()]
    );

    // Rotation: the new secret signs, the replaced one until the grace period ends.
    let at = plus(t0, 50);
    let new = WebhookSecret::generate();
    let rotated = rotate(store, &a, &new, at).await;
    let grace = i64::try_from(ROTATION_GRACE.as_secs()).expect("grace in seconds");
    assert_eq!(
        rotated,
        SubscriptionSecrets {
            current: new.clone(),
            previous: Some(a_secrets.current.clone()),
            previous_until: Some(plus(at, grace)),
        },
        "a rotation keeps the replaced secret for the grace period"
    );
    let mut a_now = a.clone();
    a_now.secrets = Some(rotated.clone());
    assert_eq!(
        get(store, &project, &a.subscription_id).await.as_ref(),
        Some(&a_now),
        "the rotated secrets are stored; nothing else changes"
    );
    let first = WebhookSecret::generate();
    assert_eq!(
        rotate(store, &legacy, &first, at).await,
        SubscriptionSecrets::new(first.clone()),
        "a subscription without secrets gets its first, with no previous"
    );
    let mut legacy_now = legacy.clone();
    legacy_now.secrets = Some(SubscriptionSecrets::new(first));
    assert_eq!(
        list(store, &project, None).await,
        vec![a_now.clone(), legacy_now.clone()],
        "listed with their secrets, in their places"
    );

    // A status change keeps the secrets; a rotation keeps the status.
    let when = plus(t0, 60);
    store
        .set_subscription_status(
            &project,
            &a.subscription_id,
            SubscriptionStatus::Disabled,
            when,
            Some("gone"),
        )
        .await
        .expect("set_subscription_status");
    let read = get(store, &project, &a.subscription_id)
        .await
        .expect("stored");
    assert_eq!(
        read.secrets.as_ref(),
        Some(&rotated),
        "disabling keeps the secrets"
    );
    let newer = WebhookSecret::generate();
    let again = rotate(store, &a, &newer, plus(t0, 70)).await;
    assert_eq!(
        (&again.current, &again.previous),
        (&newer, &Some(new.clone())),
        "a second rotation drops the oldest secret"
    );
    let read = get(store, &project, &a.subscription_id)
        .await
        .expect("stored");
    assert_eq!(
        read.status,
        SubscriptionStatus::Disabled,
        "rotating keeps the status"
    );
    assert_eq!(read.disabled_reason.as_deref(), Some("gone"));

    // Racing: a status change and a rotation both land; racing rotations both land, in
    // some order.
    let (x, y, z) = (
        WebhookSecret::generate(),
        WebhookSecret::generate(),
        WebhookSecret::generate(),
    );
    let (status, rotated_x) = tokio::join!(
        store.set_subscription_status(
            &project,
            &a.subscription_id,
            SubscriptionStatus::Active,
            plus(t0, 80),
            None,
        ),
        store.rotate_subscription_secret(&project, &a.subscription_id, &x, plus(t0, 80)),
    );
    status.expect("set_subscription_status racing a rotation");
    rotated_x.expect("a rotation racing a status change");
    let read = get(store, &project, &a.subscription_id)
        .await
        .expect("stored");
    assert_eq!(
        read.status,
        SubscriptionStatus::Active,
        "the status change stays"
    );
    assert_eq!(
        read.secrets.map(|s| s.current),
        Some(x.clone()),
        "the rotation stays"
    );
    let (ry, rz) = tokio::join!(
        store.rotate_subscription_secret(&project, &a.subscription_id, &y, plus(t0, 90)),
        store.rotate_subscription_secret(&project, &a.subscription_id, &z, plus(t0, 90)),
    );
    let (ry, rz) = (ry.expect("racing rotation"), rz.expect("racing rotation"));
    let stored = get(store, &project, &a.subscription_id)
        .await
        .and_then(|s| s.secrets)
        .expect("stored secrets");
    let one_after_the_other = (stored == rz
        && rz.previous.as_ref() == Some(&y)
        && ry.previous.as_ref() == Some(&x))
        || (stored == ry && ry.previous.as_ref() == Some(&z) && rz.previous.as_ref() == Some(&x));
    assert!(
        one_after_the_other,
        "racing rotations land one after the other, neither lost: stored {stored:?}, \
         returned {ry:?} and {rz:?}"
    );

    // Missing, deleted, or another project's: NotFound, and nothing changes.
    let other = run.project("secrets-other");
    let probe = WebhookSecret::generate();
    for (p, id) in [
        (&project, run.subscription_id("secret-none")),
        (&other, a.subscription_id.clone()),
    ] {
        assert_eq!(
            store
                .rotate_subscription_secret(p, &id, &probe, plus(t0, 95))
                .await,
            Err(StoreError::NotFound),
            "rotating an unknown subscription, or another project's, is NotFound"
        );
    }
    assert_eq!(get(store, &other, &a.subscription_id).await, None);
    assert_eq!(
        get(store, &project, &a.subscription_id)
            .await
            .and_then(|s| s.secrets),
        Some(stored),
        "untouched by the refused rotations"
    );
    assert_eq!(
        store
            .delete_subscription(&project, &legacy.subscription_id)
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .rotate_subscription_secret(&project, &legacy.subscription_id, &probe, plus(t0, 96))
            .await,
        Err(StoreError::NotFound),
        "a deleted subscription has no secret to rotate (and is not recreated)"
    );
    assert_eq!(get(store, &project, &legacy.subscription_id).await, None);
}

/// Creators racing for the last places of a scope: never more than `max` stored, and every
/// winner (`Ok(true)`) stored. `Unavailable` (a lost transaction on a remote store) counts as
/// not stored.
async fn race<S: SubscriptionStore>(store: &S, run: &Run, t0: Timestamp) {
    const MAX: usize = 4;
    for (round, (instance, held, racers)) in [
        (None, 3u8, 2),
        (Some("race-a"), 3, 6),
        (Some("race-b"), 0, 8),
    ]
    .into_iter()
    .enumerate()
    {
        let project = run.project(&format!("race-{round}"));
        for n in 0..held {
            let s = subscription(
                run.subscription_id(&format!("race-{round}-held-{n}")),
                &project,
                instance,
                plus(t0, i64::from(n)),
            );
            assert!(create(store, &s, MAX).await);
        }
        let contenders: Vec<Subscription> = (0..racers)
            .map(|n| {
                subscription(
                    run.subscription_id(&format!("race-{round}-racer-{n}")),
                    &project,
                    instance,
                    plus(t0, 100),
                )
            })
            .collect();
        let results: Vec<StoreResult<bool>> = join_all(
            contenders
                .iter()
                .map(|s| store.create_subscription(s, MAX))
                .collect(),
        )
        .await;
        let stored = list(store, &project, instance).await;
        let mut won = 0;
        for (s, r) in contenders.iter().zip(&results) {
            match r {
                Ok(true) => {
                    won += 1;
                    assert!(
                        stored.contains(s),
                        "a creator told Ok(true) is stored ({})",
                        s.subscription_id
                    );
                }
                Ok(false) | Err(StoreError::Unavailable(_)) => assert!(
                    !stored
                        .iter()
                        .any(|x| x.subscription_id == s.subscription_id),
                    "a creator told Ok(false) (or Unavailable) is not stored: {r:?}"
                ),
                Err(e) => panic!("create_subscription racing for the last places: {e}"),
            }
        }
        assert!(
            stored.len() <= MAX,
            "{racers} creators racing for {} places: at most {MAX} stored, got {}",
            MAX - usize::from(held),
            stored.len()
        );
        assert_eq!(
            stored.len(),
            usize::from(held) + won,
            "exactly the winners are stored"
        );
        assert!(won >= 1, "one of the racing creators wins: {results:?}");
    }
}
