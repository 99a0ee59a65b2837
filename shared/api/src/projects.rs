//! Projects: create, list and get; each belongs to the tenant that created it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use pricing_core::ids::{ProjectId, ProjectKey};
use pricing_core::model::Project;
use pricing_core::ports::{ProjectStore, StoreError};
use pricing_core::validate::{Errors, object};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody, Path, cursor_id, page_request};
use crate::paging::store_page;
use crate::util::{now, reject_nulls, reject_unknown_fields};

pub fn project_view(p: &Project) -> Value {
    json!({
        "projectId": p.project_id,
        "name": p.name,
        "createdAt": p.created_at,
    })
}

/// The caller's project, or 404 (also for another tenant's project: never reveal it).
pub async fn owned_project<P: Ports>(
    app: &App<P>,
    caller: &Caller,
    project_id: &str,
) -> ApiResult<Project> {
    let not_found = || ApiError::not_found(format!("project {project_id} does not exist"));
    let id = ProjectId::parse(project_id).map_err(|_| not_found())?;
    let project = app
        .ports
        .projects()
        .get_project(&ProjectKey::new(caller.tenant.clone(), id))
        .await
        .map_err(ApiError::store("reading a project"))?
        .ok_or_else(not_found)?;
    Ok(project)
}

pub async fn create<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = body.unwrap_or_else(|| json!({}));
    let mut errors = Errors::default();
    let (project_id, name) = match object(&body, "", &mut errors) {
        Some(o) => {
            reject_unknown_fields(&o, &["projectId", "name"], &[], &mut errors);
            reject_nulls(&o, &[], &mut errors);
            let id = o.opt_id::<ProjectId>("projectId", &mut errors);
            o.refuse_dot_segment("projectId", &mut errors);
            let name = o.opt_str("name", &mut errors).map(str::to_owned);
            if name.as_ref().is_some_and(|n| n.chars().count() > 256) {
                errors.push("/name", "range", "must be at most 256 characters");
            }
            (id, name)
        }
        None => (None, None),
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors.list));
    }
    let project = Project {
        project_id: project_id.unwrap_or_else(ProjectId::generate),
        tenant: caller.tenant.clone(),
        name: name.unwrap_or_default(),
        created_at: now(),
    };
    let max = app.limits.quotas.projects_per_tenant;
    match app
        .ports
        .projects()
        .create_project_within(&project, max)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(tenant = %project.tenant, max, "project quota reached");
            return Err(ApiError::quota_exceeded(format!(
                "this tenant already has {max} projects, the most a tenant may have"
            )));
        }
        Err(StoreError::Conflict(_)) => {
            return Err(ApiError::conflict(format!(
                "project {} already exists",
                project.project_id
            )));
        }
        Err(e) => return Err(ApiError::store("creating a project")(e)),
    }
    tracing::info!(project = %project.project_id, "project created");
    Ok((StatusCode::CREATED, Json(project_view(&project))))
}

pub async fn list<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let page = page_request(&query)?;
    cursor_id::<ProjectId>(&page)?;
    let (items, next) = store_page(
        page,
        |page| {
            let (app, tenant) = (&app, &caller.tenant);
            async move {
                app.ports
                    .projects()
                    .list_projects(tenant, &page)
                    .await
                    .map_err(ApiError::store("listing projects"))
            }
        },
        project_view,
    )
    .await?;
    Ok(Json(json!({ "items": items, "next": next })))
}

pub async fn get<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
) -> ApiResult<Json<Value>> {
    let project = owned_project(&app, &caller, &project_id).await?;
    Ok(Json(project_view(&project)))
}
