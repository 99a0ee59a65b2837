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
    // A RUST_LOG that does not parse logs at info, and says so once logging is up (it was
    // silently info: `warn,foo[` asked for less and got more).
    let (filter, unread) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(e) => (
            EnvFilter::new("info"),
            std::env::var("RUST_LOG").ok().map(|v| (v, e.to_string())),
        ),
    };
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
    if let Some((value, error)) = unread {
        tracing::warn!(rust_log = %value, %error, "RUST_LOG does not parse: logging at info");
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
