//! Command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "standalone",
    version,
    about = "Dynamic pricing service, standalone"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: HTTP API and entry processing on embedded storage.
    Serve(ServeArgs),
    /// Print a bearer token for a tenant (valid 24 h, or `--ttl`) as the last line of stdout.
    Token(TokenArgs),
    /// Compare pricing models on a simulated market, or on demand fitted to an instance's
    /// log: revenue per model against the optimal dynamic policy.
    Simulate(SimulateArgs),
    /// Rotate the signing keys: a new key is published at once and signs webhooks and
    /// entries 10 minutes later; the old key stays published (so that the entries it signed
    /// can be verified), its private half dropped by the first rotation a week or more after
    /// it retired. The newest 100 retired keys are kept: a rotation beyond them drops the
    /// oldest, with a warning. A running service picks the new set up within 30 s.
    RotateKeys(RotateKeysArgs),
}

#[derive(Debug, Args)]
pub struct RotateKeysArgs {
    /// Data directory of the service (its keys live there).
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Make a new key set where signing-keys.json is missing (lost, and no backup), instead
    /// of rotating: the entries signed by the lost keys will no longer verify.
    #[arg(long)]
    pub new_key_set: bool,
}

/// Which callback URLs subscriptions may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CallbackPolicyArg {
    /// http and private addresses too (local development).
    Local,
    /// https and public addresses only (as on AWS).
    Strict,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on: an IP address and a port (`127.0.0.1:8080`, `[::1]:8080`,
    /// `0.0.0.0:8080`; not a host name); port 0 picks a free port, and the chosen address
    /// is printed.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Data directory (database, keys, clients); created if missing.
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Requests per second allowed per tenant (token bucket; 0: no limit).
    #[arg(long, env = "PRICING_RATE_LIMIT", default_value_t = 1000.0, value_parser = rate)]
    pub rate_limit: f64,
    /// Burst size of the per-tenant token bucket (at least 1).
    #[arg(long, env = "PRICING_RATE_BURST", default_value_t = 2000.0, value_parser = burst)]
    pub rate_burst: f64,
    /// Projects one tenant may create (docs/limits.md).
    #[arg(long, env = "PRICING_MAX_PROJECTS_PER_TENANT", default_value_t = pricing_core::limits::DEFAULT_PROJECTS_PER_TENANT)]
    pub max_projects_per_tenant: u64,
    /// Instances one project may hold.
    #[arg(long, env = "PRICING_MAX_INSTANCES_PER_PROJECT", default_value_t = pricing_core::limits::DEFAULT_INSTANCES_PER_PROJECT)]
    pub max_instances_per_project: u64,
    /// Webhook subscriptions per project (project level) and per instance.
    #[arg(long, env = "PRICING_MAX_SUBSCRIPTIONS_PER_SCOPE", default_value_t = pricing_core::webhooks::MAX_SUBSCRIPTIONS_PER_SCOPE as u64)]
    pub max_subscriptions_per_scope: u64,
    /// Seconds a client may take to send a request's headers (from when the connection
    /// opens or its previous response went out); the connection is closed after that.
    #[arg(long, env = "PRICING_HEADER_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub header_timeout: u64,
    /// Seconds a request body may take to arrive once its handler reads it (408 after
    /// that).
    #[arg(long, env = "PRICING_BODY_TIMEOUT", default_value_t = pricing_api::app::BODY_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub body_timeout: u64,
    /// Seconds a response's write may make no progress (the client reads nothing) before
    /// the connection is closed.
    #[arg(long, env = "PRICING_SEND_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub send_timeout: u64,
    /// Client connections served at once; more wait until one closes. Default: the
    /// process's open-files limit less 512 (kept for the database and webhook deliveries).
    #[arg(long, env = "PRICING_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_connections: Option<u64>,
    /// Entry-processing workers (1 to 64).
    #[arg(long, env = "PRICING_WORKERS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// Seconds between looks for due scheduled price calculations, deactivations and
    /// webhooks to repair (1 to 86,400).
    #[arg(long, env = "PRICING_SCHEDULE_TICK", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub schedule_tick: u64,
    /// Retention (docs/retention.md): days a calculation other than an
    /// instance's latest is kept; 0 keeps them for ever, else at least 14.
    #[arg(long, env = "PRICING_RETAIN_CALCULATIONS_DAYS", default_value_t = pricing_core::retention::DEFAULT_CALCULATIONS_DAYS, value_parser = retention_days)]
    pub retain_calculations_days: u64,
    /// Days of price history kept (each item's latest entry is kept for ever); 0 = all.
    #[arg(long, env = "PRICING_RETAIN_PRICE_HISTORY_DAYS", default_value_t = pricing_core::retention::DEFAULT_PRICE_HISTORY_DAYS, value_parser = retention_days)]
    pub retain_price_history_days: u64,
    /// Days a final webhook delivery (succeeded, or failed for good) is kept; 0 = for ever.
    #[arg(long, env = "PRICING_RETAIN_DELIVERIES_DAYS", default_value_t = pricing_core::retention::DEFAULT_DELIVERIES_DAYS, value_parser = retention_days)]
    pub retain_deliveries_days: u64,
    /// Days a dispatched event is kept; 0 = for ever.
    #[arg(long, env = "PRICING_RETAIN_EVENTS_DAYS", default_value_t = pricing_core::retention::DEFAULT_EVENTS_DAYS, value_parser = retention_days)]
    pub retain_events_days: u64,
    /// Callback URLs allowed for webhook subscriptions. Default: `local` when --listen is a
    /// loopback address, `strict` otherwise (the service is reachable from other hosts).
    #[arg(long, value_enum, env = "PRICING_CALLBACK_POLICY")]
    pub callback_policy: Option<CallbackPolicyArg>,
    /// Webhook deliveries in flight at once; one destination (a callback URL's origin)
    /// holds at most a quarter of them.
    #[arg(long, env = "PRICING_DELIVERY_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub delivery_concurrency: u16,
    /// Where `/metrics` (Prometheus text) is served, on a listener of its own: HOST:PORT
    /// (port 0 picks a free port; the address is printed), or `off`. Loopback only by
    /// default; set --metrics-token before exposing it. [default: 127.0.0.1:9464, skipped
    /// with a warning when taken; an address given here must be free]
    #[arg(long, env = "PRICING_METRICS_LISTEN")]
    pub metrics_listen: Option<crate::metrics::MetricsListen>,
    /// A bearer token every scrape of `/metrics` must present (`Authorization: Bearer
    /// TOKEN`); none by default. Prefer the environment variable (a flag shows in the
    /// process list).
    #[arg(long, env = "PRICING_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Data directory of the service (its token key lives there).
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Tenant the token acts for.
    #[arg(long)]
    pub tenant: String,
    /// Lifetime in seconds: from 1 to 31,622,400 (366 days).
    #[arg(long, default_value_t = 86_400, value_parser = clap::value_parser!(i64).range(1..=31_622_400))]
    pub ttl: i64,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(subcommand)]
    pub source: SimulateSource,
    /// No progress bar (it is also hidden when stderr is not a terminal).
    #[arg(long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum SimulateSource {
    /// Simulate a market (a scenario file, or one item described by flags) through the real
    /// apply step and engine; reports each model against the optimal dynamic policy, the
    /// fluid bound and the best fixed prices (docs/scenarios.md).
    Market(MarketArgs),
    /// A counterfactual for a logged instance: demand fitted to its sales, then every model
    /// simulated against the fitted demand.
    Log(LogArgs),
}

/// Models compared when --models is not given.
pub const DEFAULT_MODELS: &str = "default,pace,timeBased,tiers,fixed";

#[derive(Debug, Args)]
pub struct MarketArgs {
    /// A market scenario (JSON, docs/scenarios.md); without it the market is
    /// the one described by the flags below.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Print the report as JSON (docs/scenarios.md, "The report").
    #[arg(long)]
    pub json: bool,
    /// Models to compare, with default parameters: `default` (the model of a product
    /// without pricingModel), pace, timeBased, tiers, fixed, or any model name the engine
    /// knows. Labelled as given.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_MODELS)]
    pub models: Vec<String>,
    /// A model with its own parameters, as LABEL=JSON (the product's `pricingModel`), e.g.
    /// 'steep={"type":"pace","sensitivity":1}'. Repeatable; compared after --models.
    #[arg(long, value_name = "LABEL=JSON")]
    pub model: Vec<String>,
    /// Monte Carlo runs (overrides the scenario's `runs`; default 200).
    #[arg(long)]
    pub runs: Option<u32>,
    /// Seed of the buyers (overrides the scenario's `seed`; default 1). Every model meets
    /// the same buyers.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Earlier instances simulated before the scored one (overrides the scenario's
    /// `pastInstances`; default 0).
    #[arg(long, value_name = "N")]
    pub past_instances: Option<u32>,
    /// Units for sale (the product capacity).
    #[arg(long, default_value_t = 1000, conflicts_with = "scenario")]
    pub capacity: u64,
    /// Length of the sales period; the main date (the event) is at its end.
    #[arg(long, default_value_t = 60, conflicts_with = "scenario")]
    pub days: u32,
    /// Scheduled price calculations per day.
    #[arg(long, default_value_t = 24, conflicts_with = "scenario")]
    pub steps_per_day: u32,
    /// Expected units demanded per day at the default price before the time factor
    /// 0.5 + 1.5 * elapsed share of the sales period (demand rises towards the event).
    #[arg(long, default_value_t = 40.0, conflicts_with = "scenario")]
    pub base_demand: f64,
    /// Price elasticity of demand at the default price (negative): buyers' willingness to
    /// pay is exponential with mean default / -elasticity.
    #[arg(
        long,
        default_value_t = -1.5,
        // Not allow_negative_numbers: clap's test of a negative number takes -1.5 but
        // not -1e-3, which was read as a flag (an outside probe).
        allow_hyphen_values = true,
        conflicts_with = "scenario"
    )]
    pub elasticity: f64,
    /// The item's default price.
    #[arg(long, default_value_t = 50.0, conflicts_with = "scenario")]
    pub default_price: f64,
    /// The item's lowest price.
    #[arg(long, default_value_t = 20.0, conflicts_with = "scenario")]
    pub min: f64,
    /// The item's highest price.
    #[arg(long, default_value_t = 150.0, conflicts_with = "scenario")]
    pub max: f64,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Data directory of the service (its database is read, not changed).
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Tenant that owns the project (project ids are scoped by tenant).
    #[arg(long)]
    pub tenant: String,
    /// Project of the instance.
    #[arg(long)]
    pub project: String,
    /// Instance whose log demand is fitted to.
    #[arg(long)]
    pub instance: String,
    /// Models to compare: current (each product's own), default, pace, timeBased, tiers,
    /// fixed, or any model name the engine knows.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "current,default,pace,timeBased,tiers,fixed"
    )]
    pub models: Vec<String>,
    /// A model with its own parameters, as LABEL=JSON (see `simulate market --help`).
    #[arg(long, value_name = "LABEL=JSON")]
    pub model: Vec<String>,
    /// Monte Carlo runs against the fitted demand.
    #[arg(long, default_value_t = 200)]
    pub runs: u32,
    /// Seed of the simulated buyers.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

impl ServeArgs {
    /// The retention policy the flags give (an error names the class and the minimum).
    pub fn retention(
        &self,
    ) -> Result<pricing_core::retention::Retention, pricing_core::retention::RetentionError> {
        pricing_core::retention::Retention::from_days(
            self.retain_calculations_days,
            self.retain_price_history_days,
            self.retain_deliveries_days,
            self.retain_events_days,
        )
    }
}

/// `--rate-limit`: requests per second, 0 (no limit) or from 0.001 to 10^9.
fn rate(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if r == 0.0 || (0.001..=1e9).contains(&r) => Ok(r),
        _ => Err(
            "must be 0 (no limit) or a number of requests per second from 0.001 to 1000000000"
                .into(),
        ),
    }
}

/// `--rate-burst`: from 1 to 10^9 requests.
fn burst(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(b) if (1.0..=1e9).contains(&b) => Ok(b),
        _ => Err("must be a number of requests from 1 to 1000000000".into()),
    }
}

/// A `--retain-*-days` value: 0 (for ever) or 14 to 36,500 days. Checked as the flag is
/// read, so the error names the flag (its environment variable is in `--help`).
fn retention_days(v: &str) -> Result<u64, String> {
    let days: u64 = v
        .parse()
        .map_err(|_| "must be a whole number of days".to_owned())?;
    pricing_core::retention::Retention::period(pricing_core::retention::Class::Events, days)
        .map(|_| days)
        .map_err(|_| {
            format!(
                "must be 0 (for ever) or {} to 36500 days",
                pricing_core::retention::MIN_DAYS
            )
        })
}
