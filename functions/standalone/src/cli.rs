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
