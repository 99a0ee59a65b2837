//! The client's errors: the service's problem+json answers, typed, and transport failures.

use serde::{Deserialize, Serialize};

use crate::types::OAuthError;

/// One field's error in a problem: where (`pointer`, a JSON pointer into the request body,
/// or the name of a parameter), which rule (`code`) and why (`message`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    #[serde(default)]
    pub pointer: String,
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// An `application/problem+json` answer (RFC 9457) of the service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    #[serde(rename = "type", default)]
    pub problem_type: String,
    #[serde(default)]
    pub title: String,
    pub status: u16,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub errors: Vec<FieldError>,
}

impl Problem {
    /// The field error at `pointer`, if any.
    pub fn error_at(&self, pointer: &str) -> Option<&FieldError> {
        self.errors.iter().find(|e| e.pointer == pointer)
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service answered with a problem (every 4xx and 5xx of the API). A 429 or 503 is
    /// only returned once the retries are spent.
    #[error("{} {}: {}", .0.status, .0.title, .0.detail)]
    Api(Box<Problem>),
    /// The token endpoint refused the client's credentials or grant.
    #[error("token endpoint: {status} {}: {}", .error.error, .error.error_description)]
    OAuth { status: u16, error: OAuthError },
    /// A success status other than the route's documented one, or an error status whose
    /// body is not a problem.
    #[error("unexpected status {status} (expected {expected}): {body}")]
    UnexpectedStatus {
        expected: u16,
        status: u16,
        body: String,
    },
    /// The answer's body is not the documented type.
    #[error("undecodable {status} answer: {source}: {body}")]
    Decode {
        status: u16,
        body: String,
        #[source]
        source: serde_json::Error,
    },
    /// Connecting, sending or reading failed (nothing is retried at this level).
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// The base or token URL cannot address the API.
    #[error("invalid URL: {0}")]
    Url(String),
    /// A webhook failed verification, or the published keys are unusable.
    #[error("webhook: {0}")]
    Webhook(#[from] crate::webhooks::VerifyError),
}

impl Error {
    /// The HTTP status of an answered call.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(p) => Some(p.status),
            Error::OAuth { status, .. }
            | Error::UnexpectedStatus { status, .. }
            | Error::Decode { status, .. } => Some(*status),
            Error::Transport(e) => e.status().map(|s| s.as_u16()),
            Error::Url(_) | Error::Webhook(_) => None,
        }
    }

    /// The problem the service answered with, if it did.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Api(p) => Some(p),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
