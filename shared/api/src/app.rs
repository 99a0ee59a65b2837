//! The application state shared by handlers: ports, keys, authentication, limits and the
//! callback URL policy.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use pricing_core::ids::TenantId;
use pricing_core::jws::{PublishedKeys, Signer};
use pricing_core::limits::Quotas;
use pricing_core::ports::{
    Admission, DeliveryStore, Enqueue, EntryLog, EventStore, InstanceStore, PriceMatchStore,
    PriceStore, ProjectStore, RateLimit, StateStore, StoreResult, SubscriptionStore,
};
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use pricing_core::webhooks::CallbackPolicy;

use crate::auth::Authenticator;

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
    type Events: EventStore;
    type Queue: Enqueue;

    fn projects(&self) -> &Self::Projects;
    fn instances(&self) -> &Self::Instances;
    fn log(&self) -> &Self::Log;
    fn state(&self) -> &Self::State;
    fn prices(&self) -> &Self::Prices;
    fn matches(&self) -> &Self::Matches;
    fn subscriptions(&self) -> &Self::Subscriptions;
    fn deliveries(&self) -> &Self::Deliveries;
    fn events(&self) -> &Self::Events;
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
        + DeliveryStore
        + EventStore,
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
    type Events = S;
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
    fn events(&self) -> &S {
        &self.store
    }
    fn queue(&self) -> &Q {
        &self.queue
    }
}

/// The most instances one `calculatePrices` request without `instanceIds` calculates (one
/// message each, sent while the request waits): a larger project is refused (422
/// `tooManyInstances`) and names its instances, 100 per request.
pub const MAX_CALCULATION_FANOUT: usize = 1_000;

/// The default of [`Limits::body_timeout`]: 5 MiB, the largest body, arrives in 60 s at
/// 0.7 Mbit/s.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Limits of the API (DESIGN.md section 3, docs/limits.md).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    /// How long a request body may take to arrive, from when the handler starts reading
    /// it: a body that stalls gets 408 instead of holding its connection and task open.
    /// (On Lambda the body has arrived whole before the function runs.)
    pub body_timeout: Duration,
    /// Per-tenant quotas on projects, instances and subscriptions.
    pub quotas: Quotas,
    /// See [`MAX_CALCULATION_FANOUT`].
    pub max_calculation_fanout: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 5 * 1024 * 1024,
            body_timeout: BODY_TIMEOUT,
            quotas: Quotas::default(),
            max_calculation_fanout: MAX_CALCULATION_FANOUT,
        }
    }
}

/// A [`RateLimit`] behind a pointer (the port's futures are not object safe): the API
/// takes any adapter.
pub trait TenantRateLimit: Send + Sync + 'static {
    fn admit<'a>(
        &'a self,
        tenant: &'a TenantId,
        now: Timestamp,
    ) -> Pin<Box<dyn Future<Output = StoreResult<Admission>> + Send + 'a>>;
}

impl<L: RateLimit> TenantRateLimit for L {
    fn admit<'a>(
        &'a self,
        tenant: &'a TenantId,
        now: Timestamp,
    ) -> Pin<Box<dyn Future<Output = StoreResult<Admission>> + Send + 'a>> {
        Box::pin(RateLimit::admit(self, tenant, now))
    }
}

/// The service's keys as one deployment holds them.
#[derive(Clone, Debug)]
pub enum ServiceKeys {
    /// The signing keys: entries are signed here, and their public halves published.
    Signing(Arc<Signer>),
    /// Only the published public keys: this deployment never signs (on AWS, the
    /// management API, which holds no private key).
    Published(Arc<PublishedKeys>),
}

impl ServiceKeys {
    /// The signer, where this deployment signs.
    pub fn signer(&self) -> Option<&Signer> {
        match self {
            ServiceKeys::Signing(signer) => Some(signer),
            ServiceKeys::Published(_) => None,
        }
    }

    /// The published key set as JWKs.
    pub fn jwks(&self) -> serde_json::Value {
        match self {
            ServiceKeys::Signing(signer) => signer.jwks(),
            ServiceKeys::Published(keys) => keys.jwks(),
        }
    }
}

impl From<Arc<Signer>> for ServiceKeys {
    fn from(signer: Arc<Signer>) -> Self {
        ServiceKeys::Signing(signer)
    }
}

impl From<Arc<PublishedKeys>> for ServiceKeys {
    fn from(keys: Arc<PublishedKeys>) -> Self {
        ServiceKeys::Published(keys)
    }
}

/// Everything a handler needs.
pub struct App<P> {
    pub ports: P,
    pub keys: ServiceKeys,
    pub auth: Arc<dyn Authenticator>,
    /// The per-tenant request limit, checked when a request is authenticated.
    pub rate_limit: Option<Arc<dyn TenantRateLimit>>,
    pub limits: Limits,
    /// Which callback URLs a subscription may name: `STRICT` (https, public hosts) unless
    /// the deployment allows more (the standalone's local development default).
    pub callback_policy: CallbackPolicy,
    /// Where this process also processes entries (the standalone): its processor, whose
    /// warm states serve the reads of instance state, so that a large instance is held
    /// once. Without it, each read loads the state from the store.
    pub warm: Option<Arc<Processor>>,
}

impl<P: Ports> App<P> {
    /// `keys`: an `Arc<Signer>` where the deployment signs entries, else an
    /// `Arc<PublishedKeys>` (see [`ServiceKeys`]).
    pub fn new(ports: P, keys: impl Into<ServiceKeys>, auth: Arc<dyn Authenticator>) -> Self {
        App {
            ports,
            keys: keys.into(),
            auth,
            rate_limit: None,
            limits: Limits::default(),
            callback_policy: CallbackPolicy::STRICT,
            warm: None,
        }
    }

    pub fn with_callback_policy(mut self, policy: CallbackPolicy) -> Self {
        self.callback_policy = policy;
        self
    }

    pub fn with_rate_limit(mut self, limiter: impl RateLimit) -> Self {
        self.rate_limit = Some(Arc::new(limiter));
        self
    }

    /// Reads of instance state share `processor`'s warm states (see [`App::warm`]).
    pub fn with_warm_states(mut self, processor: Arc<Processor>) -> Self {
        self.warm = Some(processor);
        self
    }

    pub fn with_quotas(mut self, quotas: Quotas) -> Self {
        self.limits.quotas = quotas;
        self
    }

    /// See [`Limits::body_timeout`].
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.limits.body_timeout = timeout;
        self
    }
}
