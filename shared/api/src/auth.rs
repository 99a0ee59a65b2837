//! Authentication: who is calling (the tenant), from a bearer token.
//!
//! On AWS the API Gateway JWT authorizer has verified the token and the Lambda reads the
//! claims; standalone verifies its own HS256 tokens. Both implement [`Authenticator`].

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use pricing_core::ids::TenantId;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// Finds the caller's tenant in a request, or says why not (401).
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate(&self, parts: &Parts) -> Result<TenantId, ApiError>;
}

/// The claims we read: the tenant is `tenant`, else `sub`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub iss: String,
    pub iat: i64,
    pub exp: i64,
}

/// The tenant named by a set of claims.
pub fn tenant_of(tenant: Option<&str>, sub: Option<&str>) -> Result<TenantId, ApiError> {
    tenant
        .filter(|t| !t.is_empty())
        .or(sub)
        .and_then(TenantId::from_claim)
        .ok_or_else(|| {
            ApiError::invalid_token("the token names no tenant (claim `tenant` or `sub`)")
        })
}

/// The bearer token of a request.
pub fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let mut given = parts
        .headers
        .get_all(axum::http::header::AUTHORIZATION)
        .iter();
    let value = given
        .next()
        .ok_or_else(|| ApiError::unauthorized("an Authorization: Bearer token is required"))?;
    // Two credentials say two things (RFC 6750 section 3.1: one method, once); the first
    // one won, so a valid token followed by any other header passed.
    if given.next().is_some() {
        // RFC 6750 section 3.1: a request that repeats a parameter or uses more than one
        // method for its token is `invalid_request`, a 400.
        return Err(
            ApiError::bad_request("give one Authorization header, not several").with_header(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer error=\"invalid_request\""),
            ),
        );
    }
    // A Bearer token that is not ASCII was sent and refused: `invalid_token`, as any other
    // token that does not verify (RFC 6750 section 3.1).
    let value = value.to_str().map_err(|_| {
        let bytes = value.as_bytes();
        if bytes.len() > 7 && bytes[..7].eq_ignore_ascii_case(b"bearer ") {
            ApiError::invalid_token("the bearer token is not ASCII")
        } else {
            ApiError::unauthorized("the Authorization header is not ASCII")
        }
    })?;
    let (scheme, token) = value.split_once(' ').ok_or_else(|| {
        ApiError::unauthorized("the Authorization header must be `Bearer <token>`")
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ));
    }
    Ok(token.trim())
}

/// Whether a compact JWS's protected header has a `crit` member.
fn has_critical_extensions(token: &str) -> bool {
    use base64::Engine;
    let Some(header) = token.split('.').next() else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
        .is_some_and(|h| h.get("crit").is_some())
}

/// Issues and verifies the standalone service's own tokens (HS256, secret in the data dir).
/// Only HS256 is accepted: `alg: none` and algorithm confusion fail verification.
///
/// A token that verified is remembered with its tenant and expiry ([`VerifiedTokens`]):
/// the next request with the very same token string skips the HMAC and the claims' JSON,
/// and is still refused once the token expired (the same rule as the verification). The
/// secret never changes within a process, so a token that verified once verifies again
/// until it expires; refused tokens are not remembered.
pub struct LocalTokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    verified: VerifiedTokens,
}

/// Tokens that verified, by their exact text: the tenant they name and their `exp`.
/// Bounded: past [`VerifiedTokens::MAX`] tokens it starts over (a miss costs only a
/// verification).
#[derive(Default)]
struct VerifiedTokens(Mutex<HashMap<String, (TenantId, i64)>>);

impl VerifiedTokens {
    const MAX: usize = 4_096;
    /// Longer tokens are verified every time (no token of ours is near this).
    const MAX_TOKEN: usize = 2_048;

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (TenantId, i64)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The tenant of a remembered token still valid at `now` (seconds); an expired one is
    /// forgotten.
    fn get(&self, token: &str, now: i64, leeway: i64) -> Option<TenantId> {
        let mut map = self.map();
        let (tenant, exp) = map.get(token)?;
        // jsonwebtoken's rule: expired when exp < now - leeway.
        if *exp >= now - leeway {
            return Some(tenant.clone());
        }
        map.remove(token);
        None
    }

    fn keep(&self, token: &str, tenant: &TenantId, exp: i64) {
        if token.len() > Self::MAX_TOKEN {
            return;
        }
        let mut map = self.map();
        if map.len() >= Self::MAX {
            map.clear();
        }
        map.insert(token.to_owned(), (tenant.clone(), exp));
    }
}

pub const LOCAL_ISSUER: &str = "pricing-standalone";

impl LocalTokens {
    pub fn new(secret: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[LOCAL_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        validation.validate_aud = false;
        // A token that says it is not valid yet is not (only the secret's holder can make
        // one, but it means what it says).
        validation.validate_nbf = true;
        validation.leeway = 30;
        LocalTokens {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            verified: VerifiedTokens::default(),
        }
    }

    /// A token for `tenant` (also its subject), valid for `ttl_secs`.
    pub fn issue(
        &self,
        tenant: &str,
        ttl_secs: i64,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let now = chrono::Utc::now().timestamp();
        let claims = Claims {
            sub: Some(tenant.to_owned()),
            tenant: Some(tenant.to_owned()),
            iss: LOCAL_ISSUER.to_owned(),
            iat: now,
            exp: now + ttl_secs,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
    }

    pub fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        // A header with critical extensions: none is understood here, so the JWS is
        // invalid (RFC 7515 section 4.1.11); the library does not look at `crit`.
        if has_critical_extensions(token) {
            return Err(ApiError::invalid_token(
                "the bearer token names critical header extensions (`crit`) this service does not understand",
            ));
        }
        jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map(|d| d.claims)
            .map_err(|e| {
                tracing::debug!(error = %e, "token refused");
                ApiError::invalid_token("the bearer token is invalid or expired")
            })
    }
}

impl Authenticator for LocalTokens {
    fn authenticate(&self, parts: &Parts) -> Result<TenantId, ApiError> {
        let token = bearer(parts)?;
        let now = chrono::Utc::now().timestamp();
        let leeway = i64::try_from(self.validation.leeway).unwrap_or(i64::MAX);
        if let Some(tenant) = self.verified.get(token, now, leeway) {
            return Ok(tenant);
        }
        let claims = self.verify(token)?;
        let tenant = tenant_of(claims.tenant.as_deref(), claims.sub.as_deref())?;
        self.verified.keep(token, &tenant, claims.exp);
        Ok(tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_tokens_round_trip_and_refuse_other_algorithms() {
        let tokens = LocalTokens::new(b"0123456789abcdef0123456789abcdef");
        let t = tokens.issue("acme", 60).unwrap();
        let claims = tokens.verify(&t).unwrap();
        assert_eq!(claims.tenant.as_deref(), Some("acme"));
        // alg none: header {"alg":"none"} with the same claims and no signature.
        let payload = t.split('.').nth(1).unwrap();
        let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
        assert!(tokens.verify(&none).is_err());
        // Another secret.
        let other = LocalTokens::new(b"another-secret-another-secret-00");
        assert!(tokens.verify(&other.issue("acme", 60).unwrap()).is_err());
        // Expired.
        assert!(tokens.verify(&tokens.issue("acme", -120).unwrap()).is_err());
        // Not valid before an hour from now; one whose `nbf` has passed is.
        let now = chrono::Utc::now().timestamp();
        let with_nbf = |nbf: i64| {
            let claims = serde_json::json!({"sub": "acme", "tenant": "acme", "iss": LOCAL_ISSUER,
                                            "iat": now, "exp": now + 7200, "nbf": nbf});
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &tokens.encoding).unwrap()
        };
        assert!(tokens.verify(&with_nbf(now + 3600)).is_err());
        assert!(tokens.verify(&with_nbf(now - 60)).is_ok());
        // Correctly signed, but with a critical header extension nobody here understands.
        use base64::Engine;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let signing_input = format!(
            "{}.{}",
            b64(serde_json::json!({"alg": "HS256", "typ": "JWT", "crit": ["exp2"], "exp2": 1})),
            t.split('.').nth(1).unwrap()
        );
        let signature = jsonwebtoken::crypto::sign(
            signing_input.as_bytes(),
            &tokens.encoding,
            Algorithm::HS256,
        )
        .unwrap();
        let critical = format!("{signing_input}.{signature}");
        use axum::response::IntoResponse;
        let refused = tokens.verify(&critical).unwrap_err().into_response();
        assert_eq!(refused.status(), axum::http::StatusCode::UNAUTHORIZED);
        assert_eq!(
            refused.headers()[axum::http::header::WWW_AUTHENTICATE],
            "Bearer error=\"invalid_token\""
        );
        // The same input without `crit` verifies: the signature was right.
        let plain_input = format!(
            "{}.{}",
            t.split('.').next().unwrap(),
            t.split('.').nth(1).unwrap()
        );
        let plain =
            jsonwebtoken::crypto::sign(plain_input.as_bytes(), &tokens.encoding, Algorithm::HS256)
                .unwrap();
        assert!(tokens.verify(&format!("{plain_input}.{plain}")).is_ok());
    }

    fn parts(token: &str) -> Parts {
        let (parts, ()) = axum::http::Request::builder()
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap()
            .into_parts();
        parts
    }

    /// A Bearer token that is not ASCII was sent and refused: `invalid_token`; another
    /// scheme's header that is not ASCII sent no token (a bare `Bearer` challenge).
    #[test]
    fn a_token_that_is_not_ascii_is_an_invalid_token() {
        use axum::response::IntoResponse;
        let challenge = |value: &[u8]| {
            let (parts, ()) = axum::http::Request::builder()
                .header(
                    "authorization",
                    axum::http::HeaderValue::from_bytes(value).unwrap(),
                )
                .body(())
                .unwrap()
                .into_parts();
            let refused = bearer(&parts).unwrap_err().into_response();
            assert_eq!(refused.status(), axum::http::StatusCode::UNAUTHORIZED);
            refused.headers()[axum::http::header::WWW_AUTHENTICATE].clone()
        };
        assert_eq!(
            challenge("Bearer é".as_bytes()),
            "Bearer error=\"invalid_token\""
        );
        assert_eq!(challenge("Basic é".as_bytes()), "Bearer");
    }

    /// A remembered token answers its tenant without a verification, and only while it
    /// has not expired; a refused token is refused every time.
    #[test]
    fn a_verified_token_is_remembered_until_it_expires() {
        let tokens = LocalTokens::new(b"0123456789abcdef0123456789abcdef");
        let t = tokens.issue("acme", 60).unwrap();
        assert_eq!(tokens.authenticate(&parts(&t)).unwrap().as_str(), "acme");
        assert_eq!(tokens.verified.map().len(), 1);
        assert_eq!(tokens.authenticate(&parts(&t)).unwrap().as_str(), "acme");
        // Once past its expiry (and the leeway) the remembered token is refused too:
        // the same rule as jsonwebtoken's.
        let now = chrono::Utc::now().timestamp();
        let exp = tokens.verify(&t).unwrap().exp;
        let tenant = TenantId::from_claim("acme").unwrap();
        assert!(tokens.verified.get(&t, exp + 30, 30).is_some());
        assert!(tokens.verified.get(&t, exp + 31, 30).is_none());
        assert!(
            tokens.verified.map().is_empty(),
            "an expired token is forgotten"
        );
        // A token remembered with an expiry in the past (it expired while remembered) is
        // refused and verified again, which refuses it.
        let old = tokens.issue("acme", -120).unwrap();
        tokens.verified.keep(&old, &tenant, now - 120);
        assert!(tokens.authenticate(&parts(&old)).is_err());
        assert!(tokens.authenticate(&parts(&old)).is_err());
        // Refused tokens are not remembered; another secret's token stays refused.
        let other = LocalTokens::new(b"another-secret-another-secret-00");
        let forged = other.issue("acme", 60).unwrap();
        assert!(tokens.authenticate(&parts(&forged)).is_err());
        assert!(tokens.authenticate(&parts(&forged)).is_err());
        assert!(!tokens.verified.map().contains_key(&forged));
    }
}
