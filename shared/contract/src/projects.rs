use pricing_core::model::{Page, PageRequest, Project};
use pricing_core::ports::{ProjectStore, StoreError};

use crate::fixtures::{Run, project};
use crate::{check_pages, page_request};

/// ProjectStore: create/get round trip (tenant included), `Conflict` on a taken id (for any
/// tenant), listing per tenant in project id order with cursor paging.
pub async fn project_store_contract<P: ProjectStore>(store: &P) {
    let run = Run::new("projects");
    let tenant = run.tenant("a");
    let other = run.tenant("b");

    let first = project(&run.project_id("p00"), &tenant, "First");
    store.create_project(&first).await.expect("create_project");
    assert_eq!(
        store
            .get_project(&first.project_id)
            .await
            .expect("get_project"),
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
    let stolen = Project {
        tenant: other.clone(),
        ..again
    };
    assert!(
        matches!(
            store.create_project(&stolen).await,
            Err(StoreError::Conflict(_))
        ),
        "a project id taken by one tenant is a Conflict for another"
    );
    assert_eq!(
        store
            .get_project(&first.project_id)
            .await
            .expect("get_project"),
        Some(first.clone()),
        "a refused create leaves the project as it was"
    );
    assert_eq!(
        store
            .get_project(&run.project_id("missing"))
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
    let ids: Vec<_> = theirs.iter().map(|p| p.project_id.clone()).collect();
    assert_eq!(
        ids,
        vec![run.project_id("p07"), run.project_id("p08")],
        "another tenant sees only its own projects"
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
