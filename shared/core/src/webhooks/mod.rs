//! Webhooks (DESIGN.md section 7): subscriptions and the callback URL policy, deliveries
//! and their retry schedule, request signing, and the steps that move events to
//! subscribers: [`dispatch`] (an instance's new events become deliveries), [`deliver`] (one
//! signed attempt) and [`trigger`] (a subscription's manual resend).
//!
//! At-least-once throughout: events are stored with the state change that caused them;
//! dispatch creates deliveries idempotently (a webhook id derives from the event and the
//! subscription) before it marks the events dispatched; an attempt is recorded after the
//! POST, so a crash in between resends it (same webhook id) and never loses it.

pub mod address;
pub mod deliver;
pub mod delivery;
pub mod dispatch;
pub mod history;
pub mod lane;
pub mod places;
pub mod secret;
pub mod sign;
pub mod subscription;
pub mod trigger;

pub use address::{CallbackPolicy, check_callback_url, check_new_callback_url, is_public};
pub use deliver::{Settle, deliver};
pub use delivery::{
    Attempt, AttemptUpdate, ClientReport, Delivery, DeliveryStatus, DeliverySummary, MAX_ATTEMPTS,
    RETRY_DELAYS, webhook_id,
};
pub use dispatch::{DispatchReport, dispatch};
pub use history::{EventPage, EventQuery, MAX_EVENTS_EXAMINED, read_events};
pub use lane::{OVERDUE_GRACE, WebhookSweepReport, handle, sweep};
pub use places::{DestinationPlaces, Place};
pub use secret::{ROTATION_GRACE, SubscriptionSecrets, WebhookSecret};
pub use sign::{envelope, http_date, signed_request, signing_input};
pub use subscription::{EventType, NewSubscription, Subscription, SubscriptionStatus};
pub use trigger::{TriggerReport, manual_trigger};

/// Subscriptions per project and per instance (DESIGN.md section 3).
pub const MAX_SUBSCRIPTIONS_PER_SCOPE: usize = 20;
