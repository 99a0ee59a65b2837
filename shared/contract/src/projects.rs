use pricing_core::ids::ProjectKey;
use pricing_core::model::{Page, PageRequest, Project};
use pricing_core::ports::{ProjectStore, StoreError};

use crate::fixtures::{Run, project};
use crate::{check_pages, page_request};

/// ProjectStore: create/get round trip (tenant included), `Conflict` on an id the tenant
/// already has; project ids are scoped by tenant (another tenant may create the same id,
/// and each reads only its own); listing per tenant in project id order with cursor paging.
pub async fn project_store_contract<P: ProjectStore>(store: &P) {
    let run = Run::new("projects");
    let tenant = run.tenant("a");
    let other = run.tenant("b");

    let first = project(&run.project_id("p00"), &tenant, "First");
    store.create_project(&first).await.expect("create_project");
    assert_eq!(
        store.get_project(&first.key()).await.expect("get_project"),
        Some(first.clone()),
        "a created project reads back as written, tenant included"
    );

    let again = Project {
        name: "Second".into(),
        ..first.clone()
    };
    assert!(
        matches!(
            store.create_project(&again).await,
            Err(StoreError::Conflict(_))
        ),
        "creating a project with a taken id is a Conflict"
    );
    assert_eq!(
        store.get_project(&first.key()).await.expect("get_project"),
        Some(first.clone()),
        "a refused create leaves the project as it was"
    );
    let namesake = Project {
        tenant: other.clone(),
        name: "Namesake".into(),
        ..first.clone()
    };
    store
        .create_project(&namesake)
        .await
        .expect("another tenant may create a project with the same id");
    assert_eq!(
        store
            .get_project(&namesake.key())
            .await
            .expect("get_project"),
        Some(namesake.clone()),
        "each tenant reads its own project of that id"
    );
    assert_eq!(
        store.get_project(&first.key()).await.expect("get_project"),
        Some(first.clone()),
        "the first tenant's project is untouched by the namesake"
    );
    assert_eq!(
        store
            .get_project(&ProjectKey::new(
                run.tenant("nobody"),
                first.project_id.clone()
            ))
            .await
            .expect("get_project"),
        None,
        "a tenant without that project does not see another's"
    );
    assert_eq!(
        store
            .get_project(&ProjectKey::new(tenant.clone(), run.project_id("missing")))
            .await
            .expect("get_project"),
        None,
        "an unknown project is None"
    );

    // Created out of order; listed in id order.
    let mut expected = vec![first.clone()];
    for n in ["p04", "p02", "p06", "p01", "p05", "p03"] {
        let p = project(&run.project_id(n), &tenant, &format!("Project {n}"));
        store.create_project(&p).await.expect("create_project");
        expected.push(p);
    }
    for n in ["p07", "p08"] {
        let p = project(&run.project_id(n), &other, n);
        store.create_project(&p).await.expect("create_project");
    }
    let mut theirs_expected = vec![namesake.clone()];
    theirs_expected.extend(["p07", "p08"].map(|n| project(&run.project_id(n), &other, n)));
    expected.sort_by(|a, b| a.project_id.cmp(&b.project_id));

    let (t, o) = (&tenant, &other);
    for limit in [1, 2, 3, 7, 1000] {
        let listed = check_pages(limit, |cursor| async move {
            store
                .list_projects(t, &page_request(cursor, limit))
                .await
                .expect("list_projects")
        })
        .await;
        assert_eq!(
            listed, expected,
            "list_projects with limit {limit}: the tenant's projects in id order"
        );
    }
    let theirs = check_pages(10, |cursor| async move {
        store
            .list_projects(o, &page_request(cursor, 10))
            .await
            .expect("list_projects")
    })
    .await;
    assert_eq!(
        theirs, theirs_expected,
        "another tenant sees only its own projects, its namesake of p00 included"
    );
    assert!(
        theirs.iter().all(|p| p.tenant == other),
        "listed projects carry their tenant"
    );

    let nobody = run.tenant("nobody");
    let empty: Page<Project> = store
        .list_projects(
            &nobody,
            &PageRequest {
                cursor: None,
                limit: 10,
            },
        )
        .await
        .expect("list_projects");
    assert!(
        empty.items.is_empty() && empty.next.is_none(),
        "a tenant without projects gets an empty page without next"
    );
}
