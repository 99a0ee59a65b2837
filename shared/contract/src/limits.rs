//! Per-tenant limits: the quotas of ProjectStore and InstanceStore (a create past the
//! quota writes nothing, racing creators cannot pass it) and the RateLimit port.

use std::time::Duration;

use pricing_core::ids::ProjectKey;
use pricing_core::ports::{Admission, InstanceStore, ProjectStore, RateLimit, StoreError};
use pricing_core::time::Timestamp;
use serde_json::json;

use crate::fixtures::{Run, at, header, instance, project};
use crate::{join_all, page_request};

/// ProjectStore quotas: `create_project_within(p, max)` stores while the tenant has fewer
/// than `max` projects, else `Ok(false)` with nothing written; a taken id is a `Conflict`
/// whether or not the tenant is full; other tenants are not affected; projects created
/// without a quota count too; racing creators never pass the quota.
pub async fn project_quota_contract<P: ProjectStore>(store: &P) {
    let run = Run::new("pquota");
    let tenant = run.tenant("a");
    let other = run.tenant("b");
    let p = |name: &str| project(&run.project_id(name), &tenant, name);

    for name in ["p0", "p1", "p2"] {
        assert_eq!(
            store.create_project_within(&p(name), 3).await,
            Ok(true),
            "a tenant below its quota creates a project"
        );
    }
    assert_eq!(
        store.create_project_within(&p("p3"), 3).await,
        Ok(false),
        "a tenant with `max` projects is refused"
    );
    assert_eq!(
        store
            .get_project(&ProjectKey::new(tenant.clone(), run.project_id("p3")))
            .await,
        Ok(None),
        "a refused project is not stored"
    );
    let listed = store
        .list_projects(&tenant, &page_request(None, 100))
        .await
        .expect("list_projects");
    assert_eq!(
        listed.items.len(),
        3,
        "a refused project is not listed either"
    );
    assert!(
        matches!(
            store.create_project_within(&p("p0"), 3).await,
            Err(StoreError::Conflict(_))
        ),
        "a taken id is a Conflict, also when the tenant is full"
    );
    assert_eq!(
        store
            .create_project_within(&project(&run.project_id("q0"), &other, "q0"), 3)
            .await,
        Ok(true),
        "another tenant's quota is its own"
    );
    assert_eq!(
        store.create_project_within(&p("p3"), 4).await,
        Ok(true),
        "a larger quota admits the tenant again: the count is of projects"
    );
    store
        .create_project(&p("p4"))
        .await
        .expect("create_project (no quota)");
    assert_eq!(
        store.create_project_within(&p("p5"), 5).await,
        Ok(false),
        "projects created without a quota count towards it (p0..p4 are 5)"
    );

    // Racing creators for the last places of a fresh tenant.
    let racer = run.tenant("race");
    let racing: Vec<_> = (0..6)
        .map(|i| project(&run.project_id(&format!("r{i}")), &racer, "race"))
        .collect();
    let outcomes = join_all(
        racing
            .iter()
            .map(|p| store.create_project_within(p, 2))
            .collect(),
    )
    .await;
    let created = outcomes.iter().filter(|o| **o == Ok(true)).count();
    assert!(
        outcomes.iter().all(|o| o.is_ok()),
        "racing creators are answered: {outcomes:?}"
    );
    assert_eq!(created, 2, "racing creators never pass the quota");
    let listed = store
        .list_projects(&racer, &page_request(None, 100))
        .await
        .expect("list_projects");
    assert_eq!(listed.items.len(), 2, "exactly the created ones are stored");
}

/// InstanceStore quotas: as [`project_quota_contract`], per project.
pub async fn instance_quota_contract<S: InstanceStore>(store: &S) {
    let run = Run::new("iquota");
    let h = || header(0, json!({}));
    let i = |project: &str, name: &str| instance(&run.key(project, name), name);

    for name in ["i0", "i1"] {
        assert_eq!(
            store.create_instance_within(&i("p", name), &h(), 2).await,
            Ok(true),
            "a project below its quota creates an instance"
        );
    }
    assert_eq!(
        store.create_instance_within(&i("p", "i2"), &h(), 2).await,
        Ok(false),
        "a project with `max` instances is refused"
    );
    assert_eq!(
        store.get_instance(&run.key("p", "i2")).await,
        Ok(None),
        "a refused instance is not stored"
    );
    let listed = store
        .list_instances(&run.project("p"), &page_request(None, 100))
        .await
        .expect("list_instances");
    assert_eq!(listed.items.len(), 2, "a refused instance is not listed");
    assert!(
        matches!(
            store.create_instance_within(&i("p", "i0"), &h(), 2).await,
            Err(StoreError::Conflict(_))
        ),
        "a taken id is a Conflict, also when the project is full"
    );
    assert_eq!(
        store.create_instance_within(&i("q", "i0"), &h(), 2).await,
        Ok(true),
        "another project's quota is its own"
    );
    store
        .create_instance(&i("p", "i3"), &h())
        .await
        .expect("create_instance (no quota)");
    assert_eq!(
        store.create_instance_within(&i("p", "i4"), &h(), 3).await,
        Ok(false),
        "instances created without a quota count towards it"
    );

    let racing: Vec<_> = (0..6).map(|n| i("race", &format!("r{n}"))).collect();
    let fresh = h();
    let outcomes = join_all(
        racing
            .iter()
            .map(|r| store.create_instance_within(r, &fresh, 3))
            .collect(),
    )
    .await;
    assert!(
        outcomes.iter().all(|o| o.is_ok()),
        "racing creators are answered: {outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == Ok(true)).count(),
        3,
        "racing creators never pass the quota"
    );
    let listed = store
        .list_instances(&run.project("race"), &page_request(None, 100))
        .await
        .expect("list_instances");
    assert_eq!(listed.items.len(), 3, "exactly the created ones are stored");
}

/// RateLimit. `limiter` must admit `burst` requests of a tenant at one instant and admit
/// again within a second (a token bucket of `burst` tokens refilled at `burst` a second, or
/// a window of one second holding `burst`). Checks: a tenant gets `burst` and is then
/// limited, with a `retry_after` of at most a second; another tenant meanwhile gets its own
/// `burst`; refused requests count nothing; the tenant is admitted again later; racing
/// requests never get more than `burst` through. Time is the `now` passed, never a clock.
pub async fn rate_limit_contract<L: RateLimit>(limiter: &L, burst: u64) {
    let run = Run::new("rate");
    let a = run.tenant("a");
    let b = run.tenant("b");
    let t0 = at("2030-01-01T00:00:00.250Z");
    let later = |ms: i64| Timestamp::from_millis(t0.millis() + ms).expect("a valid time");

    for n in 0..burst {
        assert_eq!(
            limiter.admit(&a, t0).await,
            Ok(Admission::Admitted),
            "request {n} of {burst} at one instant is admitted"
        );
    }
    for _ in 0..3 {
        match limiter.admit(&a, t0).await {
            Ok(Admission::Limited { retry_after }) => assert!(
                retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1),
                "retry_after is within the second: {retry_after:?}"
            ),
            other => panic!("a request past the burst is limited, got {other:?}"),
        }
    }
    for n in 0..burst {
        assert_eq!(
            limiter.admit(&b, t0).await,
            Ok(Admission::Admitted),
            "another tenant's request {n} is admitted while the first is limited"
        );
    }
    assert_eq!(
        limiter.admit(&a, later(2_000)).await,
        Ok(Admission::Admitted),
        "the limited tenant is admitted again two seconds later"
    );

    // Refused requests took nothing: at a fresh instant the whole burst is there again.
    let c = run.tenant("c");
    let outcomes = join_all(
        (0..burst * 3)
            .map(|_| limiter.admit(&c, later(10_000)))
            .collect(),
    )
    .await;
    let admitted = outcomes
        .iter()
        .filter(|o| **o == Ok(Admission::Admitted))
        .count();
    assert!(
        outcomes.iter().all(|o| o.is_ok()),
        "racing requests are answered: {outcomes:?}"
    );
    assert_eq!(
        admitted as u64, burst,
        "racing requests get exactly the burst through"
    );
}
