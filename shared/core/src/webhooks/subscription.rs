//! Subscriptions: who receives which events of a project or of one instance.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::address::{CallbackPolicy, check_new_callback_url};
use super::secret::{SubscriptionSecrets, WebhookSecret};
use crate::ids::{InstanceId, ProjectId, ProjectKey, SubscriptionId, TenantId};
use crate::model::Event;
use crate::time::Timestamp;
use crate::validate::{Errors, FieldError, codes};

/// Longest subscription description accepted.
pub const MAX_DESCRIPTION_LEN: usize = 1000;

/// The event types a subscription can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "prices.updated")]
    PricesUpdated,
    #[serde(rename = "entries.rejected")]
    EntriesRejected,
    #[serde(rename = "instance.deactivated")]
    InstanceDeactivated,
}

impl EventType {
    pub const ALL: [EventType; 3] = [
        EventType::PricesUpdated,
        EventType::EntriesRejected,
        EventType::InstanceDeactivated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::PricesUpdated => "prices.updated",
            EventType::EntriesRejected => "entries.rejected",
            EventType::InstanceDeactivated => "instance.deactivated",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionStatus {
    Active,
    /// The receiver answered 410 Gone; nothing is delivered any more.
    Disabled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub subscription_id: SubscriptionId,
    /// The owner: project ids are scoped by tenant.
    pub tenant: TenantId,
    pub project_id: ProjectId,
    /// Instance level when set; project level (every instance) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<InstanceId>,
    pub callback_url: String,
    pub events: Vec<EventType>,
    pub description: String,
    pub status: SubscriptionStatus,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// The signing secrets (none for a subscription created before they existed, until
    /// its first rotation). Never serialized with the subscription: stores keep them
    /// apart, and a view of the subscription cannot show them by accident.
    #[serde(skip)]
    pub secrets: Option<SubscriptionSecrets>,
}

impl Subscription {
    pub fn project(&self) -> ProjectKey {
        ProjectKey::new(self.tenant.clone(), self.project_id.clone())
    }

    /// Whether `event` goes to this subscription.
    pub fn wants(&self, event: &Event) -> bool {
        self.status == SubscriptionStatus::Active
            && self.project_id == event.project_id
            && self
                .instance_id
                .as_ref()
                .is_none_or(|i| *i == event.instance_id)
            && self.events.iter().any(|t| t.as_str() == event.event_type)
    }
}

/// A validated create request: `{callbackUrl, events?, description?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSubscription {
    pub callback_url: String,
    pub events: Vec<EventType>,
    pub description: String,
}

impl NewSubscription {
    /// Reads a request body; every problem is reported with its JSON Pointer.
    pub fn parse(body: &Value, policy: &CallbackPolicy) -> Result<Self, Vec<FieldError>> {
        let mut errors = Errors::default();
        let Some(obj) = body.as_object() else {
            errors.push("", codes::TYPE, "the body must be a JSON object");
            return Err(errors.list);
        };
        for key in obj.keys() {
            if !matches!(key.as_str(), "callbackUrl" | "events" | "description") {
                errors.push(
                    format!("/{}", crate::validate::escape_token(key)),
                    codes::UNKNOWN_FIELD,
                    "unknown field; expected callbackUrl, events, description",
                );
            }
        }
        let callback_url = match obj.get("callbackUrl") {
            None | Some(Value::Null) => {
                errors.push("/callbackUrl", codes::REQUIRED, "callbackUrl is required");
                None
            }
            Some(Value::String(s)) => match check_new_callback_url(s, policy) {
                Ok(_) => Some(s.clone()),
                Err(why) => {
                    errors.push("/callbackUrl", codes::FORMAT, format!("callbackUrl {why}"));
                    None
                }
            },
            Some(_) => {
                errors.push("/callbackUrl", codes::TYPE, "callbackUrl must be a string");
                None
            }
        };
        let mut events = Vec::new();
        match obj.get("events") {
            None | Some(Value::Null) => events.extend(EventType::ALL),
            Some(Value::Array(list)) if list.is_empty() => {
                errors.push(
                    "/events",
                    codes::RANGE,
                    "events must name at least one type",
                );
            }
            Some(Value::Array(list)) => {
                for (i, v) in list.iter().enumerate() {
                    match v.as_str().and_then(EventType::parse) {
                        Some(t) if !events.contains(&t) => events.push(t),
                        Some(_) => {}
                        None => errors.push(
                            format!("/events/{i}"),
                            codes::FORMAT,
                            "unknown event type; expected prices.updated, entries.rejected \
                             or instance.deactivated",
                        ),
                    }
                }
            }
            Some(_) => errors.push("/events", codes::TYPE, "events must be an array"),
        }
        events.sort();
        let description = match obj.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) if s.chars().count() <= MAX_DESCRIPTION_LEN => s.clone(),
            Some(Value::String(_)) => {
                errors.push(
                    "/description",
                    codes::TOO_LARGE,
                    format!("description is longer than {MAX_DESCRIPTION_LEN} characters"),
                );
                String::new()
            }
            Some(_) => {
                errors.push("/description", codes::TYPE, "description must be a string");
                String::new()
            }
        };
        match callback_url {
            Some(callback_url) if errors.is_empty() => Ok(NewSubscription {
                callback_url,
                events,
                description,
            }),
            _ => Err(errors.list),
        }
    }

    /// The subscription this request creates, with a new signing secret.
    pub fn into_subscription(
        self,
        project: ProjectKey,
        instance_id: Option<InstanceId>,
        now: Timestamp,
    ) -> Subscription {
        Subscription {
            subscription_id: SubscriptionId::generate(),
            tenant: project.tenant,
            project_id: project.project_id,
            instance_id,
            callback_url: self.callback_url,
            events: self.events,
            description: self.description,
            status: SubscriptionStatus::Active,
            created_at: now,
            disabled_at: None,
            disabled_reason: None,
            secrets: Some(SubscriptionSecrets::new(WebhookSecret::generate())),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_to_every_event() {
        let s = NewSubscription::parse(
            &json!({"callbackUrl": "https://h.example.com/x"}),
            &CallbackPolicy::STRICT,
        )
        .unwrap();
        assert_eq!(s.events, EventType::ALL.to_vec());
        assert_eq!(s.description, "");
    }

    #[test]
    fn reports_every_problem_with_a_pointer() {
        let errors = NewSubscription::parse(
            &json!({"callbackUrl": "http://10.0.0.1/", "events": ["prices.updated", "nope"],
                    "description": 5, "extra": true}),
            &CallbackPolicy::STRICT,
        )
        .unwrap_err();
        let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            ["/extra", "/callbackUrl", "/events/1", "/description"]
        );
        let missing = NewSubscription::parse(&json!({}), &CallbackPolicy::STRICT).unwrap_err();
        assert_eq!(missing[0].code, codes::REQUIRED);
        assert!(NewSubscription::parse(&json!([]), &CallbackPolicy::LOCAL).is_err());
    }

    #[test]
    fn a_callback_url_sent_otherwise_is_refused_with_the_form_sent() {
        let errors = NewSubscription::parse(
            &json!({"callbackUrl": "https://h.example.com/{id}"}),
            &CallbackPolicy::STRICT,
        )
        .unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].pointer, "/callbackUrl");
        assert_eq!(errors[0].code, codes::FORMAT);
        assert!(
            errors[0]
                .message
                .starts_with("callbackUrl is sent as https://h.example.com/%7Bid%7D; write it so"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn wants_matches_scope_type_and_status() {
        let project = ProjectId::parse("p").unwrap();
        let mut sub = NewSubscription {
            callback_url: "https://h.example.com".into(),
            events: vec![EventType::PricesUpdated],
            description: String::new(),
        }
        .into_subscription(
            ProjectKey::new(TenantId::from_claim("t").unwrap(), project.clone()),
            Some(InstanceId::parse("i1").unwrap()),
            Timestamp::now(),
        );
        let event = |instance: &str, t: &str| Event {
            id: "e".into(),
            event_type: t.into(),
            project_id: project.clone(),
            instance_id: InstanceId::parse(instance).unwrap(),
            created_at: Timestamp::now(),
            data: json!({}),
        };
        assert!(sub.wants(&event("i1", "prices.updated")));
        assert!(!sub.wants(&event("i2", "prices.updated")));
        assert!(!sub.wants(&event("i1", "entries.rejected")));
        sub.instance_id = None;
        assert!(sub.wants(&event("i2", "prices.updated")));
        sub.status = SubscriptionStatus::Disabled;
        assert!(!sub.wants(&event("i2", "prices.updated")));
    }
}
