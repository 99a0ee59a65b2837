//! The key-rotator's invocations: its hourly schedule, and the stack's custom resource
//! `SigningKeyBootstrap` (template.yaml), through which CloudFormation has it store the
//! first signing key before the functions that read the keys are created. The key-rotator
//! is the only function allowed to write the key secrets (docs/aws.md, "Signing keys").
//!
//! A custom resource request carries a pre-signed `ResponseURL`; CloudFormation waits for a
//! JSON document PUT there (`SUCCESS` or `FAILED`, with the ids of the request) and fails
//! the deployment on `FAILED` or when none arrives within the resource's `ServiceTimeout`.

use std::future::Future;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::wiring::Aws;

/// Characters of a failure's reason sent back (CloudFormation takes a 4 KB response).
const MAX_REASON_CHARS: usize = 1000;
/// Tries of the response PUT.
const RESPONSE_ATTEMPTS: u32 = 3;

/// What CloudFormation asks of a custom resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RequestType {
    Create,
    Update,
    Delete,
}

/// A CloudFormation custom resource request (the fields the response needs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomResourceRequest {
    pub request_type: RequestType,
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    #[serde(default)]
    pub physical_resource_id: Option<String>,
}

impl CustomResourceRequest {
    /// The request in an invocation's payload; `None` for any other event (the schedule).
    pub fn from_payload(payload: &Value) -> Option<Result<Self, serde_json::Error>> {
        (payload.get("RequestType").is_some() && payload.get("ResponseURL").is_some())
            .then(|| Self::deserialize(payload))
    }

    /// The resource's id, the same for its whole life (a new id would make CloudFormation
    /// delete the old resource).
    pub fn physical_id(&self) -> String {
        self.physical_resource_id
            .clone()
            .unwrap_or_else(|| format!("{}-signing-keys", self.logical_resource_id))
    }

    /// The response document for the outcome of the work (its data, or why it failed).
    pub fn response(&self, outcome: &Result<Value, String>) -> Value {
        let (status, reason, data) = match outcome {
            Ok(data) => ("SUCCESS", "done".to_owned(), data.clone()),
            Err(why) => (
                "FAILED",
                why.chars().take(MAX_REASON_CHARS).collect(),
                json!({}),
            ),
        };
        json!({
            "Status": status,
            "Reason": reason,
            "PhysicalResourceId": self.physical_id(),
            "StackId": self.stack_id,
            "RequestId": self.request_id,
            "LogicalResourceId": self.logical_resource_id,
            "NoEcho": false,
            "Data": data,
        })
    }
}

/// Runs `work` for a Create or Update request (a Delete needs none: the secrets go with the
/// stack) and sends CloudFormation the outcome. Errors only when the response could not be
/// sent.
pub async fn answer<F, Fut>(
    http: &reqwest::Client,
    request: &CustomResourceRequest,
    work: F,
) -> Result<Value, String>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Value, String>>,
{
    let outcome = match request.request_type {
        RequestType::Create | RequestType::Update => work().await,
        RequestType::Delete => Ok(json!({})),
    };
    if let Err(why) = &outcome {
        tracing::error!(error = %why, resource = %request.logical_resource_id, "custom resource failed");
    }
    let body = request.response(&outcome);
    send_response(http, &request.response_url, &body).await?;
    Ok(body)
}

/// PUTs the response to the pre-signed URL (no content type: it is part of the signature).
async fn send_response(http: &reqwest::Client, url: &str, body: &Value) -> Result<(), String> {
    let bytes = body.to_string();
    let mut last = String::new();
    for attempt in 1..=RESPONSE_ATTEMPTS {
        match http.put(url).body(bytes.clone()).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => last = format!("status {}", r.status()),
            Err(e) => last = e.to_string(),
        }
        tracing::warn!(attempt, error = %last, "sending the custom resource response failed");
        tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
    }
    Err(format!(
        "the custom resource response was not accepted: {last}"
    ))
}

/// The HTTP client of the responses.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// One invocation of the key-rotator: a custom resource request (store the first key and
/// publish, then answer CloudFormation) or a scheduled run (the same, and rotate when the
/// active key is `max_age` old). Returns what was done.
pub async fn key_rotator(
    aws: &Aws,
    http: &reqwest::Client,
    max_age: Option<Duration>,
    payload: &Value,
) -> Result<Value, String> {
    // Boxed: the SDK's nested futures are deep enough to overflow the compiler's layout
    // queries in the function's main otherwise.
    let maintain = |max_age| async move {
        Box::pin(aws.maintain_keys(max_age))
            .await
            .map(|done| serde_json::to_value(done).unwrap_or(Value::Null))
            .map_err(|e| e.to_string())
    };
    match CustomResourceRequest::from_payload(payload) {
        Some(Ok(request)) => {
            tracing::info!(request_type = ?request.request_type, resource = %request.logical_resource_id, "custom resource request");
            // No rotation here: a deploy is not a reason to rotate.
            answer(http, &request, || async {
                let done = maintain(None).await?;
                // CloudFormation reads string attributes.
                let kids = done["kids"]
                    .as_array()
                    .map(|k| {
                        k.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                Ok(json!({ "Kids": kids }))
            })
            .await
        }
        Some(Err(e)) => Err(format!("a malformed custom resource request: {e}")),
        None => maintain(max_age).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn request(kind: &str, physical: Option<&str>) -> Value {
        let mut r = json!({
            "RequestType": kind,
            "ServiceToken": "arn:aws:lambda:us-east-1:123:function:key-rotator",
            "ResponseURL": "https://cloudformation-custom-resource-response.s3.amazonaws.com/x?sig=1",
            "StackId": "arn:aws:cloudformation:us-east-1:123:stack/pricing/guid",
            "RequestId": "req-1",
            "ResourceType": "Custom::SigningKeys",
            "LogicalResourceId": "SigningKeyBootstrap",
            "ResourceProperties": {"ServiceToken": "arn"}
        });
        if let Some(p) = physical {
            r["PhysicalResourceId"] = json!(p);
        }
        r
    }

    #[test]
    fn custom_resource_requests_are_told_from_scheduled_events() {
        let create = CustomResourceRequest::from_payload(&request("Create", None))
            .unwrap()
            .unwrap();
        assert_eq!(create.request_type, RequestType::Create);
        assert_eq!(create.physical_id(), "SigningKeyBootstrap-signing-keys");
        let update = CustomResourceRequest::from_payload(&request("Update", Some("kept")))
            .unwrap()
            .unwrap();
        assert_eq!(update.physical_id(), "kept");
        let schedule = json!({"version": "0", "detail-type": "Scheduled Event",
                              "source": "aws.events", "detail": {}});
        assert!(CustomResourceRequest::from_payload(&schedule).is_none());
        let bad = json!({"RequestType": "Rename", "ResponseURL": "x"});
        assert!(CustomResourceRequest::from_payload(&bad).unwrap().is_err());
    }

    #[test]
    fn responses_carry_the_request_ids_and_a_bounded_reason() {
        let r = CustomResourceRequest::from_payload(&request("Create", None))
            .unwrap()
            .unwrap();
        let ok = r.response(&Ok(json!({"Kids": "k1"})));
        assert_eq!(ok["Status"], "SUCCESS");
        assert_eq!(ok["RequestId"], "req-1");
        assert_eq!(ok["LogicalResourceId"], "SigningKeyBootstrap");
        assert_eq!(ok["StackId"], r.stack_id);
        assert_eq!(ok["Data"]["Kids"], "k1");
        let failed = r.response(&Err("x".repeat(5000)));
        assert_eq!(failed["Status"], "FAILED");
        assert_eq!(failed["Reason"].as_str().unwrap().len(), MAX_REASON_CHARS);
        assert_eq!(failed["PhysicalResourceId"], ok["PhysicalResourceId"]);
    }
}
