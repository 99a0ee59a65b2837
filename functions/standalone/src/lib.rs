//! The standalone service: the shared API router and entry processor wired to the embedded
//! adapters, plus what only a self-hosted process needs (its own token issuer and clients).

pub mod cli;
pub mod datadir;
pub mod http;
pub mod metrics;
pub mod oauth;
pub mod serve;
pub mod simulate;
pub mod webhooks;
pub mod worker;

/// Structured logs to stderr; `RUST_LOG` filters (default: info), `LOG_FORMAT=json` for JSON.
pub fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: in a file or a pipe they break `grep field=value`.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Errors of the standalone process (start-up and CLI); each names what failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Setup(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

/// Writes a command's output to stdout. A reader that went away (`| head`) ends the
/// output quietly, as it would a shell tool; another failure (a full disk) is an error
/// that says so, not a panic.
pub fn write_stdout(text: &str) -> Result<(), Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Setup(format!("writing the output: {e}"))),
    }
}
