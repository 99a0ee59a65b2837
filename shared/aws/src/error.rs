//! Mapping of SDK errors onto the ports' `StoreError`: transient failures (throttling,
//! timeouts, connection errors, 5xx, transaction conflicts) are `Unavailable`, everything
//! else is `Failed`. The SDK error's whole message chain is kept
//! (`DisplayErrorContext`): it is the only clue to a misconfigured table or role.

use std::error::Error;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use pricing_core::ports::StoreError;

/// Error codes worth retrying, across DynamoDB, SQS and Secrets Manager.
const TRANSIENT_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "RequestThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
    "InternalServerError",
    "InternalServiceError",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "TransactionConflictException",
    "TransactionInProgressException",
    "KmsThrottled",
];

/// The error code of a service error response, if any.
pub(crate) fn code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Option<&str> {
    match err {
        SdkError::ServiceError(e) => e.err().code(),
        _ => None,
    }
}

/// Whether an SDK error is worth retrying later.
pub(crate) fn is_transient<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => true,
        SdkError::DispatchFailure(f) => !f.is_user(),
        SdkError::ServiceError(e) => {
            e.raw().status().is_server_error()
                || e.err().code().is_some_and(|c| TRANSIENT_CODES.contains(&c))
        }
        _ => false,
    }
}

/// `Unavailable` for transient errors, `Failed` otherwise; `op` names the operation.
pub(crate) fn store_error<E>(op: &str, err: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + Error + Send + Sync + 'static,
{
    let message = format!("{op}: {}", DisplayErrorContext(&err));
    if is_transient(&err) {
        tracing::warn!(op, error = %message, "AWS call failed transiently");
        StoreError::Unavailable(message)
    } else {
        tracing::error!(op, error = %message, "AWS call failed");
        StoreError::Failed(message)
    }
}

/// A record that does not decode, or a stored attribute of the wrong shape.
pub(crate) fn corrupt(op: &str, what: impl std::fmt::Display) -> StoreError {
    tracing::error!(op, %what, "stored record does not decode");
    StoreError::Failed(format!("{op}: {what}"))
}
