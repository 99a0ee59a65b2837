//! The webhook request: envelope and signature headers.
//!
//! `x-signature-secp256r1-sha256` is the hex DER ECDSA P-256 SHA-256 signature over
//! method + path-with-query + Date + body, concatenated without separators (one service
//! key for every tenant). `webhook-signature` is the Standard Webhooks `v1` signature
//! under the subscription's own secret ([`super::secret`]). The envelope names the
//! project and the subscription, so both signatures bind a webhook to its receiver.

use serde_json::json;
use url::Url;

use super::secret;
use super::subscription::Subscription;
use crate::ids::SubscriptionId;
use crate::jws::Signer;
use crate::model::Event;
use crate::ports::WebhookRequest;
use crate::time::Timestamp;

pub const SIGNATURE_HEADER: &str = "x-signature-secp256r1-sha256";
pub const KEY_ID_HEADER: &str = "x-signature-key-id";
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";

/// The body: `{id, eventId, type, apiVersion, createdAt, projectId, subscriptionId,
/// instanceId, data}`: `id` is the webhook's (one event sent to one subscription), `eventId`
/// the event's, as `GET .../events` lists it.
pub fn envelope(event: &Event, webhook_id: &str, subscription_id: &SubscriptionId) -> Vec<u8> {
    let body = json!({
        "id": webhook_id,
        "eventId": event.id,
        "type": event.event_type,
        "apiVersion": crate::API_VERSION,
        "createdAt": event.created_at,
        "projectId": event.project_id,
        "subscriptionId": subscription_id,
        "instanceId": event.instance_id,
        "data": event.data,
    });
    serde_json::to_vec(&body).unwrap_or_else(|e| unreachable!("a JSON value serializes: {e}"))
}

/// An HTTP date (IMF-fixdate), as the Date header carries it.
pub fn http_date(t: Timestamp) -> String {
    t.0.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// The path with its query, as signed: `/hooks/in?x=1`.
pub fn path_with_query(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    }
}

/// The bytes signed: method + path-with-query + Date + body.
pub fn signing_input(method: &str, path_with_query: &str, date: &str, body: &[u8]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(method.len() + path_with_query.len() + date.len() + body.len());
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(path_with_query.as_bytes());
    out.extend_from_slice(date.as_bytes());
    out.extend_from_slice(body);
    out
}

/// The signed POST of `event` as webhook `webhook_id` of `subscription` to `url` (its
/// callback URL), dated `now`: signed with the service key and, when the subscription has
/// secrets, with each secret that signs at `now`.
pub fn signed_request(
    signer: &Signer,
    subscription: &Subscription,
    url: &Url,
    event: &Event,
    webhook_id: &str,
    now: Timestamp,
) -> WebhookRequest {
    let body = envelope(event, webhook_id, &subscription.subscription_id);
    let date = http_date(now);
    let timestamp = now.millis().div_euclid(1000);
    let (signature, kid) = signer.sign_der(
        &signing_input("POST", &path_with_query(url), &date, &body),
        now,
    );
    let hex: String = signature.iter().map(|b| format!("{b:02x}")).collect();
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("date", date),
        (SIGNATURE_HEADER, hex),
        (KEY_ID_HEADER, kid),
        (WEBHOOK_ID_HEADER, webhook_id.to_owned()),
        (WEBHOOK_TIMESTAMP_HEADER, timestamp.to_string()),
    ];
    if let Some(secrets) = &subscription.secrets {
        headers.push((
            secret::SIGNATURE_HEADER,
            secrets.header(webhook_id, timestamp, &body, now),
        ));
    }
    WebhookRequest {
        url: url.as_str().to_owned(),
        headers,
        body,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::ids::{InstanceId, ProjectId, ProjectKey, TenantId};
    use crate::jws::StoredKey;
    use crate::webhooks::{EventType, NewSubscription, SubscriptionSecrets, WebhookSecret};

    fn subscription(project: &str, now: Timestamp) -> Subscription {
        NewSubscription {
            callback_url: "https://h.example.com/in/hook?a=1&b=2".into(),
            events: EventType::ALL.to_vec(),
            description: String::new(),
        }
        .into_subscription(
            ProjectKey::new(
                TenantId::from_claim("acme").unwrap(),
                ProjectId::parse(project).unwrap(),
            ),
            None,
            now,
        )
    }

    fn event(now: Timestamp) -> Event {
        Event {
            id: "evt_1".into(),
            event_type: "prices.updated".into(),
            project_id: ProjectId::parse("p").unwrap(),
            instance_id: InstanceId::parse("i").unwrap(),
            created_at: now,
            data: json!({"prices": []}),
        }
    }

    fn header(req: &WebhookRequest, name: &str) -> Option<String> {
        req.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn request_is_signed_over_method_path_date_and_body() {
        let now = Timestamp::parse("2026-03-04T05:06:07Z").unwrap();
        let key = StoredKey::generate("k1".into(), now).unwrap();
        let signer = Signer::from_keys(&[key]).unwrap();
        let event = event(now);
        let sub = subscription("p", now);
        let url = Url::parse(&sub.callback_url).unwrap();
        let req = signed_request(&signer, &sub, &url, &event, "wh_1", now);
        let header = |name: &str| header(&req, name).unwrap();
        assert_eq!(header("date"), "Wed, 04 Mar 2026 05:06:07 GMT");
        assert_eq!(header(KEY_ID_HEADER), "k1");
        assert_eq!(header(WEBHOOK_ID_HEADER), "wh_1");
        assert_eq!(
            header(WEBHOOK_TIMESTAMP_HEADER),
            now.0.timestamp().to_string()
        );
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(body["id"], "wh_1");
        assert_eq!(body["eventId"], event.id.as_str());
        assert_eq!(body["type"], "prices.updated");
        assert_eq!(body["apiVersion"], crate::API_VERSION);
        assert_eq!(body["instanceId"], "i");
        assert_eq!(body["projectId"], "p");
        assert_eq!(body["subscriptionId"], sub.subscription_id.as_str());

        let sig: Vec<u8> = (0..header(SIGNATURE_HEADER).len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&header(SIGNATURE_HEADER)[i..i + 2], 16).unwrap())
            .collect();
        let signed = signing_input("POST", "/in/hook?a=1&b=2", &header("date"), &req.body);
        assert!(signer.verify_der("k1", &signed, &sig));
        let mut tampered = req.body.clone();
        tampered[2] ^= 1;
        let forged = signing_input("POST", "/in/hook?a=1&b=2", &header("date"), &tampered);
        assert!(!signer.verify_der("k1", &forged, &sig));
        assert!(!signer.verify_der("other", &signed, &sig));
    }

    #[test]
    fn the_subscription_secret_signs_id_timestamp_and_body() {
        let now = Timestamp::parse("2026-03-04T05:06:07.890Z").unwrap();
        let signer = Signer::from_keys(&[StoredKey::generate("k1".into(), now).unwrap()]).unwrap();
        let (a, b) = (subscription("p", now), subscription("p", now));
        let url = Url::parse(&a.callback_url).unwrap();
        let req = signed_request(&signer, &a, &url, &event(now), "wh_1", now);
        let signature = header(&req, "webhook-signature").unwrap();
        let ts: i64 = header(&req, WEBHOOK_TIMESTAMP_HEADER)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(ts, 1_772_600_767);
        let secret_a = &a.secrets.as_ref().unwrap().current;
        assert_eq!(signature, secret_a.sign("wh_1", ts, &req.body));
        assert!(secret_a.verifies(&signature, "wh_1", ts, &req.body));
        assert!(
            !b.secrets
                .as_ref()
                .unwrap()
                .current
                .verifies(&signature, "wh_1", ts, &req.body),
            "a webhook of subscription A does not verify under B's secret"
        );
        assert!(!secret_a.verifies(&signature, "wh_1", ts + 1, &req.body));

        // The same event for B: its own subscriptionId, its own signature.
        let for_b = signed_request(&signer, &b, &url, &event(now), "wh_2", now);
        let body: Value = serde_json::from_slice(&for_b.body).unwrap();
        assert_eq!(body["subscriptionId"], b.subscription_id.as_str());
        assert!(!secret_a.verifies(
            &header(&for_b, "webhook-signature").unwrap(),
            "wh_2",
            ts,
            &for_b.body
        ));

        // Within the grace period of a rotation, the old and the new secret both sign.
        let mut rotated = a.clone();
        let new = WebhookSecret::generate();
        rotated.secrets = Some(SubscriptionSecrets::rotated(
            a.secrets.as_ref(),
            new.clone(),
            now,
        ));
        let req = signed_request(&signer, &rotated, &url, &event(now), "wh_1", now);
        let signature = header(&req, "webhook-signature").unwrap();
        assert_eq!(signature.split(' ').count(), 2);
        assert!(new.verifies(&signature, "wh_1", ts, &req.body));
        assert!(secret_a.verifies(&signature, "wh_1", ts, &req.body));

        // A subscription from before secrets existed: the service signature only.
        let mut legacy = a;
        legacy.secrets = None;
        let req = signed_request(&signer, &legacy, &url, &event(now), "wh_1", now);
        assert_eq!(header(&req, "webhook-signature"), None);
        assert!(header(&req, SIGNATURE_HEADER).is_some());
    }
}
