//! `standalone`: the pricing service in one process (HTTP API, entry processor, embedded
//! storage). `standalone serve` runs it; `standalone token` prints a bearer token.

use clap::Parser;
use standalone::cli::{Cli, Command};

/// mimalloc returns freed memory to the system; glibc's malloc, with an arena per thread
/// that allocates, kept up to ~2 GB of a 100,000-item instance's freed buffers
/// (docs/performance.md, "Memory of a 100,000-item instance").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    standalone::init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => standalone::serve::run(args).await,
            Command::Token(args) => standalone::datadir::print_token(&args),
            Command::Simulate(args) => standalone::simulate::run(args).await,
            Command::RotateKeys(args) => standalone::webhooks::rotate_keys(&args),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
