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
    /// Print a bearer token for a tenant (valid 24 h) as the last line of stdout.
    Token(TokenArgs),
    /// Compare pricing models on a generated market or an instance's entry log: prints
    /// revenue and sell-through per model.
    Simulate(SimulateArgs),
    /// Rotate the signing keys: a new key is published at once and signs webhooks and
    /// entries 10 minutes later; the old key stays published for 7 days. A running service
    /// picks the new set up within 30 s.
    RotateKeys(RotateKeysArgs),
}

#[derive(Debug, Args)]
pub struct RotateKeysArgs {
    /// Data directory of the service (its keys live there).
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
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
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Data directory (database, keys, clients); created if missing.
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Requests per second allowed per tenant (token bucket).
    #[arg(long, default_value_t = 1000.0)]
    pub rate_limit: f64,
    /// Burst size of the per-tenant token bucket.
    #[arg(long, default_value_t = 2000.0)]
    pub rate_burst: f64,
    /// Entry-processing workers.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Seconds between looks for due scheduled price calculations, deactivations and
    /// webhooks to repair.
    #[arg(long, default_value_t = 60)]
    pub schedule_tick: u64,
    /// Callback URLs allowed for webhook subscriptions.
    #[arg(long, value_enum, default_value_t = CallbackPolicyArg::Local, env = "PRICING_CALLBACK_POLICY")]
    pub callback_policy: CallbackPolicyArg,
    /// Webhook deliveries in flight at once.
    #[arg(long, default_value_t = 64)]
    pub delivery_concurrency: usize,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Data directory of the service (its token key lives there).
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Tenant the token acts for.
    #[arg(long)]
    pub tenant: String,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 86_400)]
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
    /// Simulate a market: Poisson demand with a price elasticity, rising towards the event.
    Market(MarketArgs),
    /// Replay an instance's entry log: the logged sales, priced by each model.
    Log(LogArgs),
}

#[derive(Debug, Args)]
pub struct MarketArgs {
    /// Models to compare, with default parameters: pace, timeBased, tiers, fixed.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pace,timeBased,tiers,fixed"
    )]
    pub models: Vec<String>,
    /// A model with its own parameters, as LABEL=JSON (the product's `pricingModel`), e.g.
    /// 'steep={"type":"pace","sensitivity":1}'. Repeatable; compared after --models.
    #[arg(long, value_name = "LABEL=JSON")]
    pub model: Vec<String>,
    /// Units for sale (the product capacity).
    #[arg(long, default_value_t = 1000)]
    pub capacity: u64,
    /// Length of the sales period; the main date (the event) is at its end.
    #[arg(long, default_value_t = 60)]
    pub days: u32,
    /// Price calculations (scheduled) and demand draws per day.
    #[arg(long, default_value_t = 24)]
    pub steps_per_day: u32,
    /// Expected units demanded per day at the default price (before the time factor
    /// 0.5 + 1.5 * elapsed share of the sales period).
    #[arg(long, default_value_t = 40.0)]
    pub base_demand: f64,
    /// Price elasticity of demand: demand scales with (price / default)^elasticity.
    #[arg(long, default_value_t = -1.5, allow_negative_numbers = true)]
    pub elasticity: f64,
    /// The item's default price.
    #[arg(long, default_value_t = 50.0)]
    pub default_price: f64,
    /// The item's lowest price.
    #[arg(long, default_value_t = 20.0)]
    pub min: f64,
    /// The item's highest price.
    #[arg(long, default_value_t = 150.0)]
    pub max: f64,
    /// Seed of the demand draws; every model meets the same draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Data directory of the service (its database is read, not changed).
    #[arg(long, default_value = "./data")]
    pub data: PathBuf,
    /// Project of the instance.
    #[arg(long)]
    pub project: String,
    /// Instance whose log is replayed.
    #[arg(long)]
    pub instance: String,
    /// Models to compare: current (each product's own), pace, timeBased, tiers, fixed.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "current,pace,timeBased,tiers,fixed"
    )]
    pub models: Vec<String>,
    /// A model with its own parameters, as LABEL=JSON (see `simulate market --help`).
    #[arg(long, value_name = "LABEL=JSON")]
    pub model: Vec<String>,
}
