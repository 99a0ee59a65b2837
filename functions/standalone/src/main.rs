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

/// mimalloc's `purge_delay` option: `mi_option_purge_delay` in its v3 `mimalloc.h`, which
/// the binding names no constant for (the test below checks the index by its default).
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The service returns freed memory to the system at once instead of after mimalloc's
/// default second: a large instance's calculations and reads free tens of MB in bursts, and
/// a second later the next burst allocated again before it was returned (a 100,000-item
/// instance peaked at 321 MB instead of 217-219; docs/performance.md, "Memory of a
/// 100,000-item instance"). What it costs: memory allocated again is faulted in again (a
/// 10,000-item recalculation 4 to 8 ms more). `MIMALLOC_PURGE_DELAY` in the environment
/// (read by mimalloc itself) overrides it.
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn return_freed_memory_at_once() {
    // Set but empty is no setting (mimalloc would ignore it too).
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none_or(|v| v.is_empty()) {
        // SAFETY: `mi_option_set` stores one integer option; it takes no pointers and may
        // be called at any time. This runs before the runtime starts any thread.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "mimalloc")]
    if matches!(cli.command, Command::Serve(_)) {
        return_freed_memory_at_once();
    }
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

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    /// The option index is `purge_delay`'s: the only option whose default is 1,000 (ms).
    #[test]
    #[allow(unsafe_code)]
    fn the_purge_delay_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the environment's value is read instead of the default
        }
        // SAFETY: reads one integer option.
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1_000);
    }
}
