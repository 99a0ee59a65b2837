//! Project ids are scoped by tenant: two tenants may both have project `p` with an
//! instance `i`, and every store keeps their records apart.

use pricing_core::ids::ProjectKey;
use pricing_core::model::{AppendOutcome, PageRequest};
use pricing_core::ports::{EntryLog, InstanceStore, StateStore, SubscriptionStore};
use serde_json::json;

use crate::fixtures::{Run, at, header, instance, instance_id, new_entry, subscription};

/// Instances, logs, state and subscriptions of the same (project, instance) ids under two
/// tenants are separate records: each tenant reads, lists and appends only its own, and
/// the same transaction id deduplicates per tenant's instance.
pub async fn tenant_isolation_contract<S>(store: &S)
where
    S: InstanceStore + EntryLog + StateStore + SubscriptionStore,
{
    let run = Run::new("tenants");
    // B is named as an identity provider may name a subject (`abc@clients`, `auth0|123`):
    // any claim a token may carry must read back from every record that stores it.
    let (a, b) = (run.tenant("a"), run.tenant("b@clients|x y"));
    let project = run.project_id("p");
    let key_a = ProjectKey::new(a, project.clone()).instance(instance_id("i"));
    let key_b = ProjectKey::new(b, project).instance(instance_id("i"));

    let mine = instance(&key_a, "A's instance");
    store
        .create_instance(&mine, &header(0, json!({"owner": "a"})))
        .await
        .expect("create_instance");
    assert_eq!(
        store.get_instance(&key_b).await.expect("get_instance"),
        None,
        "another tenant's namesake instance does not exist until it creates one"
    );
    let theirs = instance(&key_b, "B's instance");
    store
        .create_instance(&theirs, &header(0, json!({"owner": "b"})))
        .await
        .expect("another tenant may create an instance with the same project and id");
    assert_eq!(
        store.get_instance(&key_a).await.expect("get_instance"),
        Some(mine.clone())
    );
    assert_eq!(
        store.get_instance(&key_b).await.expect("get_instance"),
        Some(theirs.clone())
    );
    let page = PageRequest {
        cursor: None,
        limit: 10,
    };
    for (key, expected, owner) in [(&key_a, &mine, "a"), (&key_b, &theirs, "b")] {
        let listed = store
            .list_instances(&key.project(), &page)
            .await
            .expect("list_instances");
        assert_eq!(
            listed.items,
            vec![expected.clone()],
            "a tenant lists only its own instances"
        );
        let state = store.load_state(key).await.expect("load_state");
        assert_eq!(
            state.header.meta.get("owner"),
            Some(&json!(owner)),
            "each tenant's instance has its own state"
        );
    }

    let out = store
        .append(&key_a, vec![new_entry(Some("t-1"), 1), new_entry(None, 2)])
        .await
        .expect("append");
    assert_eq!(out.len(), 2);
    assert_eq!(store.last_sequence(&key_b).await.expect("last_sequence"), 0);
    assert_eq!(
        store
            .append(&key_b, vec![new_entry(Some("t-1"), 3)])
            .await
            .expect("append"),
        vec![AppendOutcome::Accepted { sequence: 1 }],
        "a transaction id is deduplicated per tenant's instance, not across tenants"
    );
    assert_eq!(store.read(&key_a, 0, 10).await.expect("read").len(), 2);
    assert_eq!(store.read(&key_b, 0, 10).await.expect("read").len(), 1);

    let sub = subscription(
        run.subscription_id("s"),
        &key_a.project(),
        None,
        at("2026-04-05T06:07:08Z"),
    );
    assert!(
        store
            .create_subscription(&sub, 20)
            .await
            .expect("create_subscription")
    );
    assert_eq!(
        store
            .get_subscription(&key_b.project(), &sub.subscription_id)
            .await
            .expect("get_subscription"),
        None,
        "another tenant's namesake project does not see the subscription"
    );
    assert!(
        store
            .list_subscriptions(&key_b.project(), None)
            .await
            .expect("list_subscriptions")
            .is_empty()
    );
    assert!(
        !store
            .delete_subscription(&key_b.project(), &sub.subscription_id)
            .await
            .expect("delete_subscription"),
        "another tenant cannot delete it"
    );
    assert_eq!(
        store
            .get_subscription(&key_a.project(), &sub.subscription_id)
            .await
            .expect("get_subscription"),
        Some(sub)
    );
}
