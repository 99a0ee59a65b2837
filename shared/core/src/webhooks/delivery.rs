//! Deliveries: one webhook (an event for one subscription) and its attempts, the retry
//! schedule, and how a response is judged.

use std::time::Duration;

use chrono::{
    DateTime, Datelike, Month, Months, NaiveDate, NaiveDateTime, NaiveTime, Utc, Weekday,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::subscription::Subscription;
use crate::ids::{InstanceId, ProjectId, ProjectKey, SubscriptionId, TenantId};
use crate::model::Event;
use crate::time::Timestamp;

/// Delays before the retries: after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h.
pub const RETRY_DELAYS: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];
/// The first attempt and every retry.
pub const MAX_ATTEMPTS: u32 = RETRY_DELAYS.len() as u32 + 1;
/// Retry-After is honoured up to this long (SQS hides a message for at most 12 h) ...
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(11 * 3600);
/// ... and from this long (a receiver asking for 0 s is not hammered).
pub const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Client error reports kept per delivery (the oldest are kept).
pub const MAX_CLIENT_REPORTS: usize = 20;
/// Longest error text stored for an attempt or a client report.
pub const MAX_ERROR_LEN: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not attempted yet.
    Pending,
    /// Attempted and failed; another attempt is scheduled (`nextAttemptAt`).
    Retrying,
    Succeeded,
    /// For good: every attempt failed, the receiver answered 410, or the subscription is
    /// gone.
    Failed,
}

impl DeliveryStatus {
    pub fn is_final(self) -> bool {
        matches!(self, DeliveryStatus::Succeeded | DeliveryStatus::Failed)
    }
}

/// One attempt, as the delivery log shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    pub attempt: u32,
    pub attempted_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// An error the receiver reported later (`POST /webhooks/errors`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientReport {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub reported_at: Timestamp,
}

/// One webhook: an event for one subscription, with the state of its delivery. Its
/// `webhook_id` is the envelope id and the `webhook-id` header, stable across attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub webhook_id: String,
    pub subscription_id: SubscriptionId,
    /// The owner: project ids are scoped by tenant.
    pub tenant: TenantId,
    pub project_id: ProjectId,
    pub instance_id: InstanceId,
    pub event_type: String,
    pub created_at: Timestamp,
    /// Attempts made so far.
    pub attempt: u32,
    pub status: DeliveryStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_at: Option<Timestamp>,
    /// When the next attempt is due (pending and retrying deliveries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Timestamp>,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    #[serde(default)]
    pub client_reports: Vec<ClientReport>,
    /// What is sent (the body is built from it with the webhook id).
    pub event: Event,
}

/// The webhook id of `event` for `subscription`: the same on every dispatch of the event.
pub fn webhook_id(event_id: &str, subscription_id: &SubscriptionId) -> String {
    let digest = Sha256::digest(format!("webhook\n{event_id}\n{subscription_id}"));
    let hex: String = digest[..13].iter().map(|b| format!("{b:02x}")).collect();
    format!("wh_{hex}")
}

impl Delivery {
    pub fn project(&self) -> ProjectKey {
        ProjectKey::new(self.tenant.clone(), self.project_id.clone())
    }

    /// A new delivery of `event` to `subscription`, due at `now`.
    pub fn new(event: &Event, subscription: &Subscription, now: Timestamp) -> Self {
        Delivery {
            webhook_id: webhook_id(&event.id, &subscription.subscription_id),
            subscription_id: subscription.subscription_id.clone(),
            tenant: subscription.tenant.clone(),
            project_id: event.project_id.clone(),
            instance_id: event.instance_id.clone(),
            event_type: event.event_type.clone(),
            created_at: now,
            attempt: 0,
            status: DeliveryStatus::Pending,
            response_status: None,
            error: None,
            attempted_at: None,
            next_attempt_at: Some(now),
            attempts: Vec::new(),
            client_reports: Vec::new(),
            event: event.clone(),
        }
    }

    /// The delivery as its log lists it: everything but the event, of which only the id
    /// is kept.
    pub fn summary(&self) -> DeliverySummary {
        DeliverySummary {
            webhook_id: self.webhook_id.clone(),
            subscription_id: self.subscription_id.clone(),
            tenant: self.tenant.clone(),
            project_id: self.project_id.clone(),
            instance_id: self.instance_id.clone(),
            event_type: self.event_type.clone(),
            event_id: self.event.id.clone(),
            created_at: self.created_at,
            attempt: self.attempt,
            status: self.status,
            response_status: self.response_status,
            error: self.error.clone(),
            attempted_at: self.attempted_at,
            next_attempt_at: self.next_attempt_at,
            attempts: self.attempts.clone(),
            client_reports: self.client_reports.clone(),
        }
    }
}

/// A delivery's entry in the delivery log: every field of [`Delivery`] but the event (up
/// to ~100 KB), of which only the id is kept. What `DeliveryStore::list_deliveries`
/// returns, so that a store lists deliveries without reading their events.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliverySummary {
    pub webhook_id: String,
    pub subscription_id: SubscriptionId,
    pub tenant: TenantId,
    pub project_id: ProjectId,
    pub instance_id: InstanceId,
    pub event_type: String,
    /// The id of the event sent.
    pub event_id: String,
    pub created_at: Timestamp,
    /// Attempts made so far.
    pub attempt: u32,
    pub status: DeliveryStatus,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    pub attempted_at: Option<Timestamp>,
    /// When the next attempt is due (pending and retrying deliveries).
    pub next_attempt_at: Option<Timestamp>,
    pub attempts: Vec<Attempt>,
    pub client_reports: Vec<ClientReport>,
}

impl DeliverySummary {
    /// The delivery log's view (DESIGN.md section 8): fields that do not apply (yet) are
    /// left out.
    pub fn view(&self) -> Value {
        let mut v = json!({
            "deliveryId": self.webhook_id,
            "webhookId": self.webhook_id,
            "subscriptionId": self.subscription_id,
            "instanceId": self.instance_id,
            "eventType": self.event_type,
            "eventId": self.event_id,
            "createdAt": self.created_at,
            "attempt": self.attempt,
            "status": self.status,
            "attempts": self.attempts,
            "clientReports": self.client_reports,
        });
        let optional = [
            ("responseStatus", self.response_status.map(Value::from)),
            ("error", self.error.clone().map(Value::from)),
            ("attemptedAt", self.attempted_at.map(|t| json!(t))),
            ("nextAttemptAt", self.next_attempt_at.map(|t| json!(t))),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                v[name] = value;
            }
        }
        v
    }
}

/// What an attempt changes on a delivery; stored only if the delivery has made
/// `attempt - 1` attempts and is not final (so concurrent attempts record once).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptUpdate {
    pub attempt: u32,
    pub status: DeliveryStatus,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    pub attempted_at: Timestamp,
    pub next_attempt_at: Option<Timestamp>,
    pub record: Attempt,
}

impl AttemptUpdate {
    /// Applies the update to a delivery (what a store writes).
    pub fn apply(&self, d: &mut Delivery) {
        d.attempt = self.attempt;
        d.status = self.status;
        d.response_status = self.response_status;
        d.error.clone_from(&self.error);
        d.attempted_at = Some(self.attempted_at);
        d.next_attempt_at = self.next_attempt_at;
        d.attempts.push(self.record.clone());
    }
}

/// The result of one POST as the transport saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Status {
        status: u16,
        /// The Retry-After header, verbatim.
        retry_after: Option<String>,
    },
    /// No response: connection refused, timeout, refused address ...
    Error(String),
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    /// 410 Gone: the subscription is disabled and nothing is retried.
    Gone,
    /// Retry, not before `retry_after` if the receiver asked (429 or 503).
    Failed {
        retry_after: Option<Duration>,
    },
}

/// Judges a response: only a 2xx is success (redirects are not followed, so a 3xx fails).
pub fn judge(response: &Response, now: Timestamp) -> Verdict {
    match response {
        Response::Status { status, .. } if (200..300).contains(status) => Verdict::Succeeded,
        Response::Status { status: 410, .. } => Verdict::Gone,
        Response::Status {
            status: 429 | 503,
            retry_after,
        } => Verdict::Failed {
            retry_after: retry_after
                .as_deref()
                .and_then(|v| parse_retry_after(v, now)),
        },
        _ => Verdict::Failed { retry_after: None },
    }
}

/// Retry-After: delay-seconds or an HTTP date (RFC 9110 section 10.2.3) in any of the three
/// forms a recipient must accept (section 5.6.7): IMF-fixdate
/// `Sun, 06 Nov 1994 08:49:37 GMT`, the obsolete RFC 850 form
/// `Sunday, 06-Nov-94 08:49:37 GMT` and asctime's `Sun Nov  6 08:49:37 1994` (only the first
/// was read until an outside probe sent the other two).
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // delay-seconds too large for a u64 is still a delay: the longest (the caller caps
        // it at MAX_RETRY_AFTER), not no header at all.
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let at = http_date(value, now)?;
    let ms = at.timestamp_millis() - now.millis();
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// An HTTP date in any of its three forms; `now` places an RFC 850 two-digit year.
fn http_date(value: &str, now: Timestamp) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc2822(value) {
        return Some(at.to_utc());
    }
    if let Ok(at) = NaiveDateTime::parse_from_str(value, "%a %b %e %H:%M:%S %Y") {
        return Some(at.and_utc());
    }
    rfc850_date(value, now)
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`. The year is the latest with those two last digits that
/// is not more than 50 years after `now` (RFC 9110 section 5.6.7), and the weekday must be
/// that date's.
fn rfc850_date(value: &str, now: Timestamp) -> Option<DateTime<Utc>> {
    let (weekday, rest) = value.split_once(", ")?;
    let (date, time) = rest.strip_suffix(" GMT")?.split_once(' ')?;
    let time = NaiveTime::parse_from_str(time, "%H:%M:%S").ok()?;
    let mut parts = date.split('-');
    let (day, month, yy) = (parts.next()?, parts.next()?, parts.next()?);
    let two_digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some() || !two_digits(day) || !two_digits(yy) {
        return None;
    }
    let (day, yy): (u32, i32) = (day.parse().ok()?, yy.parse().ok()?);
    let month = month.parse::<Month>().ok()?.number_from_month();
    let latest = now.0.checked_add_months(Months::new(50 * 12))?;
    let latest = (latest.year(), latest.month(), latest.day(), latest.time());
    let century = now.0.year() - now.0.year().rem_euclid(100);
    let year = [century + 100 + yy, century + yy, century - 100 + yy]
        .into_iter()
        .find(|&year| (year, month, day, time) <= latest)?;
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    (weekday.parse::<Weekday>().ok()? == date.weekday()).then(|| date.and_time(time).and_utc())
}

/// The delay before the next attempt after `attempts_made` failed ones, or `None` when
/// that was the last. The schedule's delay gets +-10 % jitter (derived from the webhook
/// id, so it is reproducible). A Retry-After the receiver sent with 429 or 503 lengthens
/// it: the receiver knows when it can take the webhook again (bounded to
/// [`MIN_RETRY_AFTER`]..=[`MAX_RETRY_AFTER`]). It never shortens it: the attempt still
/// counts, and a receiver asking for 1 s again and again would otherwise use up all eight
/// attempts within seconds and lose the webhook for good (an outside probe saw it).
pub fn retry_delay(
    attempts_made: u32,
    webhook_id: &str,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    let index = usize::try_from(attempts_made.checked_sub(1)?).ok()?;
    let base = *RETRY_DELAYS.get(index)?;
    let digest = Sha256::digest(format!("{webhook_id}\n{attempts_made}"));
    // A fraction in [-0.1, 0.1].
    let unit = f64::from(u16::from_be_bytes([digest[0], digest[1]])) / f64::from(u16::MAX);
    let jittered = base.mul_f64(0.9 + 0.2 * unit);
    Some(match retry_after {
        Some(asked) => asked.clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER).max(jittered),
        None => jittered,
    })
}

/// Cuts a text to [`MAX_ERROR_LEN`] characters.
pub fn bounded(text: &str) -> String {
    if text.chars().count() <= MAX_ERROR_LEN {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(MAX_ERROR_LEN - 1).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_has_seven_retries_with_bounded_jitter() {
        assert_eq!(MAX_ATTEMPTS, 8);
        for (i, base) in RETRY_DELAYS.iter().enumerate() {
            let made = u32::try_from(i).unwrap() + 1;
            for id in ["wh_a", "wh_b", "wh_c", "wh_d"] {
                let d = retry_delay(made, id, None).unwrap();
                assert!(d >= base.mul_f64(0.9) && d <= base.mul_f64(1.1), "{d:?}");
                assert_eq!(retry_delay(made, id, None), Some(d), "reproducible");
            }
        }
        assert_eq!(retry_delay(8, "wh_a", None), None);
        assert_eq!(retry_delay(0, "wh_a", None), None);
        let spread: std::collections::HashSet<_> = (0..20)
            .map(|i| retry_delay(2, &format!("wh_{i}"), None))
            .collect();
        assert!(spread.len() > 10, "jitter spreads retries");
    }

    #[test]
    fn retry_after_lengthens_the_schedule_within_bounds() {
        let d = retry_delay(1, "wh_a", Some(Duration::from_secs(120))).unwrap();
        assert_eq!(d, Duration::from_secs(120));
        // Shorter than the schedule: the schedule's (eight quick 429s with `Retry-After: 1`
        // used to fail a webhook for good within 8 s).
        let scheduled = retry_delay(2, "wh_a", None).unwrap();
        for asked in [Duration::from_secs(2), Duration::ZERO] {
            assert_eq!(retry_delay(2, "wh_a", Some(asked)), Some(scheduled));
        }
        let d = retry_delay(1, "wh_a", Some(Duration::ZERO)).unwrap();
        assert_eq!(
            d,
            retry_delay(1, "wh_a", None).unwrap().max(MIN_RETRY_AFTER)
        );
        let total: Duration = (1..MAX_ATTEMPTS)
            .map(|made| retry_delay(made, "wh_a", Some(Duration::from_secs(1))).unwrap())
            .sum();
        assert!(total >= Duration::from_secs(24 * 3600), "{total:?}");
        let d = retry_delay(1, "wh_a", Some(Duration::from_secs(999_999))).unwrap();
        assert_eq!(d, MAX_RETRY_AFTER);
        // More seconds than a u64 holds: the longest delay, not the schedule's (found by
        // an outside probe: 20 nines were ignored).
        let now = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let huge = parse_retry_after("99999999999999999999", now);
        assert_eq!(huge, Some(Duration::from_secs(u64::MAX)));
        assert_eq!(retry_delay(1, "wh_a", huge), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
        // The last attempt stays the last, whatever the receiver asks.
        assert_eq!(retry_delay(8, "wh_a", Some(Duration::from_secs(1))), None);
    }

    #[test]
    fn judging_responses() {
        let now = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let status = |s: u16, ra: Option<&str>| Response::Status {
            status: s,
            retry_after: ra.map(str::to_owned),
        };
        assert_eq!(judge(&status(200, None), now), Verdict::Succeeded);
        assert_eq!(judge(&status(204, None), now), Verdict::Succeeded);
        assert_eq!(judge(&status(410, None), now), Verdict::Gone);
        assert_eq!(
            judge(&status(302, None), now),
            Verdict::Failed { retry_after: None }
        );
        assert_eq!(
            judge(&status(429, Some("30")), now),
            Verdict::Failed {
                retry_after: Some(Duration::from_secs(30))
            }
        );
        assert_eq!(
            judge(&status(503, Some("Thu, 01 Jan 2026 00:01:00 GMT")), now),
            Verdict::Failed {
                retry_after: Some(Duration::from_secs(60))
            }
        );
        // Retry-After means nothing on other statuses.
        assert_eq!(
            judge(&status(500, Some("30")), now),
            Verdict::Failed { retry_after: None }
        );
        assert_eq!(
            judge(&Response::Error("refused".into()), now),
            Verdict::Failed { retry_after: None }
        );
    }

    /// RFC 9110 section 5.6.7: a recipient must accept all three forms of an HTTP date
    /// (found by an outside probe: only IMF-fixdate was read, the other two ignored).
    #[test]
    fn retry_after_reads_every_form_of_an_http_date() {
        let now = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let minute = Some(Duration::from_secs(60));
        for value in [
            "Thu, 01 Jan 2026 00:01:00 GMT",
            "Thursday, 01-Jan-26 00:01:00 GMT",
            "Thu Jan  1 00:01:00 2026",
            " Thu Jan  1 00:01:00 2026 ",
            "60",
        ] {
            assert_eq!(parse_retry_after(value, now), minute, "{value}");
        }
        let day = Some(Duration::from_secs(10 * 86_400 + 60));
        assert_eq!(parse_retry_after("Sun Jan 11 00:01:00 2026", now), day);
        // A date past is no delay.
        for value in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                parse_retry_after(value, now),
                Some(Duration::ZERO),
                "{value}"
            );
        }
        for garbage in [
            "soon",
            "1.5",
            "30s",
            "+30",
            "0x10",
            "Thu, 01 Jan 2026 00:01:00",
            "Fri, 01 Jan 2026 00:01:00 GMT",
            "Thu, 32 Jan 2026 00:01:00 GMT",
            "Friday, 01-Jan-26 00:01:00 GMT",
            "Thursday, 01-Jan-2026 00:01:00 GMT",
            "Thursday, 1-Jan-26 00:01:00 GMT",
            "Thursday, 01-Jan-26 00:01:00 PST",
            "Thursday, 01-Jan-26 00:01:00",
            "Thursday, 01-Foo-26 00:01:00 GMT",
            "Thursday, 01-Jan-26-1 00:01:00 GMT",
            "Thursday, 01-Jan-26 24:01:00 GMT",
            "Thu Jan  1 00:01:00",
            "Fri Jan  1 00:01:00 2026",
            "Thu Jan 32 00:01:00 2026",
        ] {
            assert_eq!(parse_retry_after(garbage, now), None, "{garbage}");
        }
    }

    /// An RFC 850 year of two digits is the latest with those digits that is not more than
    /// 50 years ahead (RFC 9110 section 5.6.7).
    #[test]
    fn an_rfc850_year_is_at_most_50_years_ahead() {
        let now = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let year = |value: &str| rfc850_date(value, now).map(|at| at.year());
        assert_eq!(year("Friday, 01-Jan-27 00:00:00 GMT"), Some(2027));
        assert_eq!(year("Wednesday, 01-Jan-76 00:00:00 GMT"), Some(2076));
        assert_eq!(year("Friday, 02-Jan-76 00:00:00 GMT"), Some(1976));
        assert_eq!(year("Thursday, 02-Jan-76 00:00:00 GMT"), None);
        assert_eq!(year("Sunday, 06-Nov-94 08:49:37 GMT"), Some(1994));
        assert_eq!(year("Tuesday, 29-Feb-00 00:00:00 GMT"), Some(2000));
        let later = Timestamp::parse("2099-06-01T00:00:00Z").unwrap();
        let at = rfc850_date("Friday, 01-Jan-00 00:00:00 GMT", later).unwrap();
        assert_eq!(at.year(), 2100);
    }

    #[test]
    fn a_summary_is_the_delivery_without_its_event() {
        let t = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let event = Event {
            id: "evt_1".into(),
            event_type: "prices.updated".into(),
            project_id: ProjectId::parse("p").unwrap(),
            instance_id: InstanceId::parse("i").unwrap(),
            created_at: t,
            data: json!({"prices": [{"itemId": "a", "price": 1.5}]}),
        };
        let d = Delivery {
            webhook_id: webhook_id(&event.id, &SubscriptionId::parse("s").unwrap()),
            subscription_id: SubscriptionId::parse("s").unwrap(),
            tenant: TenantId::from_claim("t").unwrap(),
            project_id: event.project_id.clone(),
            instance_id: event.instance_id.clone(),
            event_type: event.event_type.clone(),
            created_at: t,
            attempt: 1,
            status: DeliveryStatus::Retrying,
            response_status: Some(500),
            error: None,
            attempted_at: Some(t),
            next_attempt_at: Some(t),
            attempts: vec![Attempt {
                attempt: 1,
                attempted_at: t,
                response_status: Some(500),
                error: None,
                duration_ms: 12,
            }],
            client_reports: Vec::new(),
            event,
        };
        let summary = d.summary();
        assert_eq!(summary.event_id, "evt_1");
        assert_eq!(summary.attempts, d.attempts);
        let view = summary.view();
        assert_eq!(view["eventId"], "evt_1");
        assert_eq!(view["deliveryId"], view["webhookId"]);
        assert_eq!(view["responseStatus"], 500);
        assert!(view.get("event").is_none() && view.get("data").is_none());
        assert!(
            view.get("error").is_none(),
            "what does not apply is left out"
        );
    }

    #[test]
    fn webhook_ids_are_stable_and_distinct() {
        let a = SubscriptionId::parse("A").unwrap();
        let b = SubscriptionId::parse("B").unwrap();
        assert_eq!(webhook_id("evt_1", &a), webhook_id("evt_1", &a));
        assert_ne!(webhook_id("evt_1", &a), webhook_id("evt_1", &b));
        assert_ne!(webhook_id("evt_1", &a), webhook_id("evt_2", &a));
    }
}
