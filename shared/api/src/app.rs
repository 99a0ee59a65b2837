//! The application state shared by handlers: ports, keys, authentication, limits and the
//! callback URL policy.

use std::sync::Arc;

use pricing_core::jws::Signer;
use pricing_core::ports::{
    DeliveryStore, Enqueue, EntryLog, InstanceStore, PriceMatchStore, PriceStore, ProjectStore,
    StateStore, SubscriptionStore,
};
use pricing_core::webhooks::CallbackPolicy;

use crate::auth::{Authenticator, RateLimiter};

/// The adapters the API works on.
pub trait Ports: Send + Sync + 'static {
    type Projects: ProjectStore;
    type Instances: InstanceStore;
    type Log: EntryLog;
    type State: StateStore;
    type Prices: PriceStore;
    type Matches: PriceMatchStore;
    type Subscriptions: SubscriptionStore;
    type Deliveries: DeliveryStore;
    type Queue: Enqueue;

    fn projects(&self) -> &Self::Projects;
    fn instances(&self) -> &Self::Instances;
    fn log(&self) -> &Self::Log;
    fn state(&self) -> &Self::State;
    fn prices(&self) -> &Self::Prices;
    fn matches(&self) -> &Self::Matches;
    fn subscriptions(&self) -> &Self::Subscriptions;
    fn deliveries(&self) -> &Self::Deliveries;
    fn queue(&self) -> &Self::Queue;
}

/// Ports from one store implementing every storage port and one queue.
pub struct Stores<S, Q> {
    pub store: S,
    pub queue: Q,
}

impl<S, Q> Ports for Stores<S, Q>
where
    S: ProjectStore
        + InstanceStore
        + EntryLog
        + StateStore
        + PriceStore
        + PriceMatchStore
        + SubscriptionStore
        + DeliveryStore,
    Q: Enqueue,
{
    type Projects = S;
    type Instances = S;
    type Log = S;
    type State = S;
    type Prices = S;
    type Matches = S;
    type Subscriptions = S;
    type Deliveries = S;
    type Queue = Q;

    fn projects(&self) -> &S {
        &self.store
    }
    fn instances(&self) -> &S {
        &self.store
    }
    fn log(&self) -> &S {
        &self.store
    }
    fn state(&self) -> &S {
        &self.store
    }
    fn prices(&self) -> &S {
        &self.store
    }
    fn matches(&self) -> &S {
        &self.store
    }
    fn subscriptions(&self) -> &S {
        &self.store
    }
    fn deliveries(&self) -> &S {
        &self.store
    }
    fn queue(&self) -> &Q {
        &self.queue
    }
}

/// Limits of the API (DESIGN.md section 3).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 5 * 1024 * 1024,
        }
    }
}

/// Everything a handler needs.
pub struct App<P> {
    pub ports: P,
    pub signer: Arc<Signer>,
    pub auth: Arc<dyn Authenticator>,
    pub rate_limit: Option<RateLimiter>,
    pub limits: Limits,
    /// Which callback URLs a subscription may name: `STRICT` (https, public hosts) unless
    /// the deployment allows more (the standalone's local development default).
    pub callback_policy: CallbackPolicy,
}

impl<P: Ports> App<P> {
    pub fn new(ports: P, signer: Arc<Signer>, auth: Arc<dyn Authenticator>) -> Self {
        App {
            ports,
            signer,
            auth,
            rate_limit: None,
            limits: Limits::default(),
            callback_policy: CallbackPolicy::STRICT,
        }
    }

    pub fn with_callback_policy(mut self, policy: CallbackPolicy) -> Self {
        self.callback_policy = policy;
        self
    }

    pub fn with_rate_limit(mut self, limiter: RateLimiter) -> Self {
        self.rate_limit = Some(limiter);
        self
    }
}
