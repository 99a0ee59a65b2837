//! The caller's tenant on AWS: API Gateway's JWT authorizer has verified the token, and
//! its claims arrive in the request context. Tenant = `tenant` claim, else `sub`.

use axum::http::request::Parts;
use lambda_http::request::RequestContext;
use pricing_api::ApiError;
use pricing_api::auth::{Authenticator, tenant_of};
use pricing_core::ids::TenantId;

/// Reads the claims the authorizer put in the request context. A request without them did
/// not pass the authorizer (a route configured without auth): 401.
pub struct AuthorizerClaims;

impl Authenticator for AuthorizerClaims {
    fn authenticate(&self, parts: &Parts) -> Result<TenantId, ApiError> {
        let claims = match parts.extensions.get::<RequestContext>() {
            Some(RequestContext::ApiGatewayV2(ctx)) => ctx
                .authorizer
                .as_ref()
                .and_then(|a| a.jwt.as_ref())
                .map(|jwt| &jwt.claims),
            _ => None,
        }
        .ok_or_else(|| ApiError::unauthorized("no verified token claims in the request"))?;
        tenant_of(
            claims.get("tenant").map(String::as_str),
            claims.get("sub").map(String::as_str),
        )
    }
}
