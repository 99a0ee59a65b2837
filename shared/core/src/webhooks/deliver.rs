//! One delivery attempt: load the delivery, check it is due and its subscription active,
//! POST the signed webhook, judge the response, record the attempt, and tell the queue
//! consumer what to do with the message.

use std::time::{Duration, Instant};

use url::Url;

use super::delivery::{
    Attempt, AttemptUpdate, Delivery, DeliveryStatus, MAX_ATTEMPTS, Response, Verdict, bounded,
    judge, retry_delay,
};
use super::places::deferral;
use super::sign::signed_request;
use super::subscription::{Subscription, SubscriptionStatus};
use crate::jws::Signer;
use crate::ports::{DeliveryStore, StoreResult, SubscriptionStore, WebhookTransport};
use crate::time::Timestamp;

/// What to do with the message that asked for the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Delete it: delivered, or nothing (more) to do.
    Done,
    /// Make it visible again after this delay (the next attempt, or not due yet).
    RetryIn(Duration),
    /// Every attempt failed: move it to the dead-letter queue where there is one (the
    /// failure is recorded on the delivery either way).
    DeadLetter,
}

/// Attempts the delivery `webhook_id` if it is due at `now`.
pub async fn deliver<S, T>(
    store: &S,
    transport: &T,
    signer: &Signer,
    webhook_id: &str,
    now: Timestamp,
) -> StoreResult<Settle>
where
    S: DeliveryStore + SubscriptionStore,
    T: WebhookTransport,
{
    let Some(delivery) = store.get_delivery(webhook_id).await? else {
        // Never stored (or removed): nothing to send.
        return Ok(Settle::Done);
    };
    match delivery.status {
        DeliveryStatus::Succeeded => return Ok(Settle::Done),
        DeliveryStatus::Failed => return Ok(Settle::DeadLetter),
        DeliveryStatus::Pending | DeliveryStatus::Retrying => {}
    }
    if let Some(due) = delivery.next_attempt_at {
        let wait = due.millis() - now.millis();
        if wait > 1000 {
            return Ok(Settle::RetryIn(Duration::from_millis(wait.unsigned_abs())));
        }
    }
    let attempt = delivery.attempt + 1;
    let subscription = store
        .get_subscription(&delivery.project(), &delivery.subscription_id)
        .await?;
    let (response, duration_ms) = match usable(subscription.as_ref()) {
        Err(why) => (Response::Error(why.to_owned()), 0),
        Ok((sub, url)) => {
            // A destination whose places are taken (a receiver that hangs, holding each
            // for the whole timeout) is not attempted now: the delivery waits, uncounted,
            // and the pool's places go to the other destinations.
            let destination = url.origin().ascii_serialization();
            let Some(_place) = transport.take_place(&destination, delivery.tenant.as_str()) else {
                return Ok(Settle::RetryIn(deferral(webhook_id)));
            };
            let request = signed_request(signer, sub, &url, &delivery.event, webhook_id, now);
            let started = Instant::now();
            let response = transport.post(request).await;
            let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            (response, ms)
        }
    };
    let verdict = match (&subscription, usable(subscription.as_ref())) {
        // Nothing was sent and nothing will be: the subscription is gone or disabled.
        (_, Err(_)) => Verdict::Gone,
        _ => judge(&response, now),
    };
    let update = attempt_update(&delivery, attempt, &response, &verdict, duration_ms, now);
    // The retry is due its delay after the attempt ended (a receiver that timed out took
    // 15 s), which is when the message is put back.
    let ended = now
        .millis()
        .saturating_add(i64::try_from(duration_ms).unwrap_or(i64::MAX));
    let settle = match update.status {
        DeliveryStatus::Succeeded => Settle::Done,
        DeliveryStatus::Retrying => {
            let next = update.next_attempt_at.map_or(0, |t| t.millis() - ended);
            Settle::RetryIn(Duration::from_millis(next.unsigned_abs()))
        }
        // A subscription that is gone is not a delivery problem worth a dead letter.
        DeliveryStatus::Failed if usable(subscription.as_ref()).is_err() => Settle::Done,
        DeliveryStatus::Failed | DeliveryStatus::Pending => Settle::DeadLetter,
    };
    // Disable first: a crash before the attempt is recorded then leaves a disabled
    // subscription, whose redelivered message fails without another request.
    let answered_gone = matches!(response, Response::Status { status: 410, .. });
    if let Some(sub) =
        subscription.filter(|s| answered_gone && s.status == SubscriptionStatus::Active)
    {
        store
            .set_subscription_status(
                &sub.project(),
                &sub.subscription_id,
                SubscriptionStatus::Disabled,
                now,
                Some("the receiver answered 410 Gone"),
            )
            .await?;
    }
    if !store.record_attempt(webhook_id, &update).await? {
        // Another worker recorded this attempt (a duplicate message): it settles.
        return Ok(Settle::Done);
    }
    Ok(settle)
}

/// The subscription and its URL, if a webhook may go to it.
fn usable(subscription: Option<&Subscription>) -> Result<(&Subscription, Url), &'static str> {
    let sub = subscription.ok_or("the subscription was deleted")?;
    if sub.status != SubscriptionStatus::Active {
        return Err("the subscription is disabled");
    }
    let url = Url::parse(&sub.callback_url).map_err(|_| "the callback URL does not parse")?;
    Ok((sub, url))
}

fn attempt_update(
    delivery: &Delivery,
    attempt: u32,
    response: &Response,
    verdict: &Verdict,
    duration_ms: u64,
    now: Timestamp,
) -> AttemptUpdate {
    let (response_status, error) = match response {
        Response::Status { status, .. } if (200..300).contains(status) => (Some(*status), None),
        Response::Status { status, .. } => (
            Some(*status),
            Some(format!("the receiver answered {status}")),
        ),
        Response::Error(e) => (None, Some(bounded(e))),
    };
    let (status, next_attempt_at) = match verdict {
        Verdict::Succeeded => (DeliveryStatus::Succeeded, None),
        Verdict::Gone => (DeliveryStatus::Failed, None),
        Verdict::Failed { retry_after } => {
            match retry_delay(attempt, &delivery.webhook_id, *retry_after) {
                Some(delay) if attempt < MAX_ATTEMPTS => {
                    // From the attempt's end (`now` is its start): until 2026-11-29 the
                    // record said a timed-out attempt's retry was due before it ended.
                    let ms = i64::try_from(delay.as_millis())
                        .unwrap_or(i64::MAX)
                        .saturating_add(i64::try_from(duration_ms).unwrap_or(i64::MAX));
                    let at = Timestamp::from_millis(now.millis().saturating_add(ms));
                    (DeliveryStatus::Retrying, at)
                }
                _ => (DeliveryStatus::Failed, None),
            }
        }
    };
    AttemptUpdate {
        attempt,
        status,
        response_status,
        error: error.clone(),
        attempted_at: now,
        next_attempt_at,
        record: Attempt {
            attempt,
            attempted_at: now,
            response_status,
            error,
            duration_ms,
        },
    }
}
