//! `standalone serve`: wires the embedded adapters to the API router and the workers.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pricing_api::auth::{Authenticator, LocalTokens};
use pricing_api::{App, Stores};
use pricing_core::jws::Signer;
use pricing_core::limits::Quotas;
use pricing_core::process::Processor;
use pricing_core::webhooks::CallbackPolicy;
use pricing_embedded::{EmbeddedStore, TokenBuckets};
use pricing_http::HttpTransport;
use tokio::sync::watch;

use crate::Error;
use crate::cli::{CallbackPolicyArg, ServeArgs};
use crate::datadir::{
    Clients, ensure_dir, lock_data_dir, private_database, restrict_database, signing_keys_kept,
    token_secret,
};
use crate::oauth::{self, TokenEndpoint};

const DATABASE_FILE: &str = "pricing.db";

/// How long a shutdown waits for the workers (the scheduler, webhook deliveries, the queue
/// workers), after the requests in flight.
const WORKERS_GRACE: Duration = Duration::from_secs(10);

/// The callback policy of `serve`: the one asked for (`--callback-policy` or
/// `PRICING_CALLBACK_POLICY`), else `local` when every listen address is loopback (local
/// development), else `strict`: a service reachable from other hosts must not let a tenant
/// make it call into the private network.
pub fn callback_policy(asked: Option<CallbackPolicyArg>, listen: &[SocketAddr]) -> CallbackPolicy {
    let loopback_only =
        !listen.is_empty() && listen.iter().all(|a| a.ip().to_canonical().is_loopback());
    match asked {
        Some(CallbackPolicyArg::Local) => CallbackPolicy::LOCAL,
        Some(CallbackPolicyArg::Strict) => CallbackPolicy::STRICT,
        None if loopback_only => CallbackPolicy::LOCAL,
        None => CallbackPolicy::STRICT,
    }
}

pub async fn run(args: ServeArgs) -> Result<(), Error> {
    let retention = args.retention().map_err(|e| Error::Setup(e.to_string()))?;
    // A metrics token that is set but blank (an empty file read into the variable) would
    // serve /metrics to anyone: refused, like any other unusable setting, before anything
    // is opened (the database's schema upgrade included).
    if args
        .metrics_token
        .as_deref()
        .is_some_and(|t| t.trim().is_empty())
    {
        return Err(Error::Setup(
            "--metrics-token (PRICING_METRICS_TOKEN) is set but blank: give the token, or unset it to serve /metrics without one".into(),
        ));
    }
    // The listeners first: an address that cannot be had stops the start before the data
    // directory is created or its database opened (and upgraded).
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: args.listen.to_string(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Listen {
        addr: args.listen.to_string(),
        source,
    })?;
    let metrics_listener = bind_metrics(&args).await?;
    let limits = http_limits(&args);
    ensure_dir(&args.data)?;
    // Held until `run` returns: one `serve` per data directory.
    let _lock = lock_data_dir(&args.data)?;
    let database = args.data.join(DATABASE_FILE);
    signing_keys_kept(&args.data, &database)?;
    pricing_embedded::keys::remove_stale_temporaries(&args.data);
    let keys = pricing_embedded::keys::load_or_create_signing_keys(&args.data)
        .map_err(|e| Error::Setup(format!("signing keys: {e}")))?;
    let signer = Arc::new(Signer::from_keys(&keys).map_err(|e| Error::Setup(e.to_string()))?);
    let tokens = Arc::new(LocalTokens::new(&token_secret(&args.data)?));
    let (clients, created) = Clients::load_or_create(&args.data)?;
    // Its secret is kept only hashed and shown once, below: until then the client is
    // pending, and a start that stops before (its port taken, killed) leaves none, so the
    // next start makes and shows a new one (found by outside probes: the client was kept,
    // never shown, unusable).
    let unshown = UnshownClient(created.is_some().then(|| args.data.clone()));
    private_database(&database)?;
    let store =
        EmbeddedStore::open(&database).map_err(|e| Error::Setup(format!("database: {e}")))?;
    // SQLite gives -wal and -shm the database's mode; this covers files an older version
    // left readable.
    restrict_database(&database)?;

    let ports = Stores {
        store: store.clone(),
        queue: store.clone(),
    };
    let policy = callback_policy(args.callback_policy, &[args.listen]);
    // One destination may hold a quarter of the delivery pool: a receiver that hangs
    // cannot make every other subscriber wait (docs/webhooks.md, "Attempts").
    let transport = Arc::new(
        HttpTransport::builder(policy)
            .places(places_per_destination(usize::from(
                args.delivery_concurrency,
            )))
            .build()
            .map_err(|e| Error::Setup(format!("HTTP client: {e}")))?,
    );
    let auth: Arc<dyn Authenticator> = tokens.clone();
    // The workers' processor; its warm states also serve the API's reads of state.
    let processor = Arc::new(Processor::new());
    let mut app = App::new(ports, signer.clone(), auth);
    if args.rate_limit > 0.0 {
        app = app.with_rate_limit(TokenBuckets::new(args.rate_limit, args.rate_burst));
    }
    let app = app
        .with_quotas(Quotas {
            projects_per_tenant: args.max_projects_per_tenant,
            instances_per_project: args.max_instances_per_project,
            subscriptions_per_scope: args.max_subscriptions_per_scope,
        })
        .with_body_timeout(Duration::from_secs(args.body_timeout))
        .with_callback_policy(policy)
        .with_warm_states(processor.clone());
    let router = pricing_api::router(Arc::new(app)).merge(pricing_api::traced(oauth::router(
        Arc::new(TokenEndpoint {
            tokens,
            clients,
            body_timeout: Duration::from_secs(args.body_timeout),
        }),
    )));

    let metrics_addr = metrics_listener
        .map(|l| serve_metrics(l, &args, &store, &signer))
        .transpose()?;

    // This process owns the database: whatever was in flight belongs to a dead process.
    let released = match (
        store.release_in_flight().await,
        store.webhook_queue().release_in_flight().await,
    ) {
        (Ok(work), Ok(webhooks)) => Ok(work + webhooks),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    match released {
        Ok(0) => {}
        Ok(n) => tracing::info!(messages = n, "released work left in flight by the last run"),
        Err(e) => tracing::warn!(error = %e, "could not release work left in flight"),
    }
    let (stop, stopped) = watch::channel(false);
    let workers: Vec<_> = (0..args.workers)
        .map(|_| {
            tokio::spawn(crate::worker::run(
                store.clone(),
                processor.clone(),
                stopped.clone(),
            ))
        })
        .collect();
    let deliveries = tokio::spawn(crate::webhooks::run(
        store.clone(),
        transport,
        signer.clone(),
        usize::from(args.delivery_concurrency),
        stopped.clone(),
    ));
    let key_watch = tokio::spawn(crate::webhooks::watch_keys(
        args.data.clone(),
        signer,
        stopped.clone(),
    ));
    crate::worker::sweep(&store).await;
    let scheduler = tokio::spawn(crate::worker::schedule(
        store.clone(),
        Duration::from_secs(args.schedule_tick),
        retention,
        stopped.clone(),
    ));

    {
        let mut out = std::io::stdout().lock();
        if let Some(c) = created {
            let _ = writeln!(
                out,
                "created the local OAuth client (the secret is shown only now):\n  client_id={}\n  client_secret={}\n  tenant={}",
                c.client_id, c.client_secret, c.tenant
            );
        }
        let _ = writeln!(out, "data directory {}", args.data.display());
        let _ = writeln!(
            out,
            "callback policy {}",
            if policy == CallbackPolicy::LOCAL {
                "local (http and private addresses allowed)"
            } else {
                "strict (https to public addresses only)"
            }
        );
        if let Some(m) = metrics_addr {
            let _ = writeln!(out, "metrics on http://{m}/metrics");
        }
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
    }
    unshown.shown();
    tracing::info!(%addr, data = %args.data.display(), retention = %retention.describe(), max_connections = limits.max_connections, "service started");

    crate::http::serve(listener, router, limits, shutdown_signal()).await;

    tracing::info!("shutting down: finishing work in progress");
    let _ = stop.send(true);
    // The workers get 10 s in all (docs/operations.md): a webhook attempt in flight could
    // hold the stop for its whole timeout (15 s), past what a supervisor sized from the
    // docs waits before it kills the process. Work not finished by then is taken up again
    // after the restart (its queued message is delivered again).
    let deadline = tokio::time::Instant::now() + WORKERS_GRACE;
    let mut unfinished = 0;
    for task in [scheduler, key_watch, deliveries]
        .into_iter()
        .chain(workers)
    {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            unfinished += 1;
        }
    }
    if unfinished > 0 {
        tracing::warn!(
            unfinished,
            grace_secs = WORKERS_GRACE.as_secs(),
            "work still in progress at shutdown was left; its messages are delivered again after the restart"
        );
    }
    tracing::info!("stopped");
    Ok(())
}

/// The data directory of a client a first start created, until its secret is shown: then
/// kept ([`Clients::keep_new`]); dropped before that (the start failed), forgotten.
struct UnshownClient(Option<std::path::PathBuf>);

impl UnshownClient {
    fn shown(mut self) {
        if let Some(dir) = self.0.take()
            && let Err(e) = Clients::keep_new(&dir)
        {
            tracing::warn!(error = %e, "could not keep the new OAuth client: the next start makes another");
        }
    }
}

impl Drop for UnshownClient {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            Clients::forget_new(&dir);
        }
    }
}

/// The `/metrics` listener (crate::metrics), unless it is `off`. The default address taken
/// by another process is a warning (the service runs without `/metrics`); an address given
/// explicitly must be free.
async fn bind_metrics(args: &ServeArgs) -> Result<Option<tokio::net::TcpListener>, Error> {
    use crate::metrics::{DEFAULT_METRICS_LISTEN, MetricsListen};
    // Only the default gives way to another instance on the host: an address the operator
    // set (flag or environment), even the default's, must be free (it was compared with
    // the default's value, so a scrape target pinned to 127.0.0.1:9464 was skipped).
    let (listen, given) = match args.metrics_listen {
        Some(listen) => (listen, true),
        None => (
            DEFAULT_METRICS_LISTEN
                .parse()
                .map_err(|e: String| Error::Setup(format!("--metrics-listen default: {e}")))?,
            false,
        ),
    };
    let MetricsListen::At(at) = listen else {
        return Ok(None);
    };
    match tokio::net::TcpListener::bind(at).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if !given => {
            tracing::warn!(addr = %at, error = %e, "/metrics not served: its default address is taken (--metrics-listen)");
            Ok(None)
        }
        Err(source) => Err(Error::Setup(format!(
            "cannot listen for /metrics (--metrics-listen) on {at}: {source}"
        ))),
    }
}

/// Serves `/metrics` on `listener` (from [`bind_metrics`]); its address.
fn serve_metrics(
    listener: tokio::net::TcpListener,
    args: &ServeArgs,
    store: &EmbeddedStore,
    signer: &Arc<Signer>,
) -> Result<SocketAddr, Error> {
    use crate::metrics::Scrape;
    let registry = crate::metrics::registry();
    let addr = listener.local_addr().map_err(|source| Error::Listen {
        addr: "the /metrics listener".into(),
        source,
    })?;
    let token = args.metrics_token.as_deref();
    if token.is_none() && !addr.ip().to_canonical().is_loopback() {
        tracing::warn!(%addr, "/metrics is served beyond loopback without a token (--metrics-token)");
    }
    let scrape = Scrape::new(
        registry,
        store.clone(),
        signer.clone(),
        token.map(str::trim),
    );
    let router = crate::metrics::router(Arc::new(scrape));
    // Not `http_limits`: its default cap would read the process's limits for nothing.
    let limits = crate::http::Limits {
        header_timeout: Duration::from_secs(args.header_timeout),
        send_timeout: Duration::from_secs(args.send_timeout),
        max_connections: METRICS_CONNECTIONS,
    };
    tokio::spawn(crate::http::serve(
        listener,
        router,
        limits,
        std::future::pending(),
    ));
    Ok(addr)
}

/// Webhook attempts in flight to one destination: a quarter of the delivery pool.
pub fn places_per_destination(delivery_concurrency: usize) -> usize {
    (delivery_concurrency / 4).max(1)
}

/// Connections the `/metrics` listener serves at once (scrapers; within the descriptors the
/// API's cap leaves free).
const METRICS_CONNECTIONS: usize = 64;

/// The API listener's timeouts and connection cap.
fn http_limits(args: &ServeArgs) -> crate::http::Limits {
    crate::http::Limits {
        header_timeout: Duration::from_secs(args.header_timeout),
        send_timeout: Duration::from_secs(args.send_timeout),
        max_connections: args.max_connections.map_or_else(
            crate::http::default_max_connections,
            |n| {
                let asked = usize::try_from(n).unwrap_or(usize::MAX);
                let fits = crate::http::default_max_connections();
                if asked > fits {
                    // Each connection is a file descriptor: past the process's limit the
                    // accepts fail (and the database or a webhook delivery may find none).
                    tracing::warn!(
                        max_connections = asked,
                        fits,
                        "--max-connections is above what the open-files limit leaves for clients (ulimit -n less 512): raise the limit, or connections past it fail"
                    );
                }
                asked
            },
        ),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter()
            .map(|a| a.parse().expect("an address"))
            .collect()
    }

    /// Issue 9, item 11: the policy was `local` (http and private callbacks) whatever the
    /// service listened on.
    #[test]
    fn the_callback_policy_is_strict_unless_every_listen_address_is_loopback() {
        for local in [
            &["127.0.0.1:8080"][..],
            &["127.3.2.1:0"],
            &["[::1]:8080"],
            &["[::ffff:127.0.0.1]:8080"],
            &["127.0.0.1:1", "[::1]:2"],
        ] {
            assert_eq!(
                callback_policy(None, &addrs(local)),
                CallbackPolicy::LOCAL,
                "{local:?}"
            );
        }
        for exposed in [
            &["0.0.0.0:8080"][..],
            &["[::]:8080"],
            &["192.168.1.10:8080"],
            &["10.0.0.1:80"],
            &["127.0.0.1:1", "0.0.0.0:2"],
            &[],
        ] {
            assert_eq!(
                callback_policy(None, &addrs(exposed)),
                CallbackPolicy::STRICT,
                "{exposed:?}"
            );
        }
    }

    #[test]
    fn an_explicit_callback_policy_wins() {
        let any = addrs(&["0.0.0.0:8080"]);
        let loopback = addrs(&["127.0.0.1:8080"]);
        assert_eq!(
            callback_policy(Some(CallbackPolicyArg::Local), &any),
            CallbackPolicy::LOCAL
        );
        assert_eq!(
            callback_policy(Some(CallbackPolicyArg::Strict), &loopback),
            CallbackPolicy::STRICT
        );
    }

    #[test]
    fn the_flag_has_no_default_value() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["standalone", "serve", "--listen", "0.0.0.0:1"])
            .expect("parses");
        let crate::cli::Command::Serve(args) = cli.command else {
            panic!("serve");
        };
        if std::env::var_os("PRICING_CALLBACK_POLICY").is_none() {
            assert_eq!(args.callback_policy, None);
        }
        let cli =
            crate::cli::Cli::try_parse_from(["standalone", "serve", "--callback-policy", "local"])
                .expect("parses");
        let crate::cli::Command::Serve(args) = cli.command else {
            panic!("serve");
        };
        assert_eq!(args.callback_policy, Some(CallbackPolicyArg::Local));
    }

    #[test]
    fn rate_flags_are_checked_at_start() {
        use clap::Parser;
        let parse = |flag: &str, value: &str| {
            crate::cli::Cli::try_parse_from(["standalone", "serve", flag, value])
        };
        // A rate near 0 made every request over the burst panic (its wait fits no
        // Duration); 0 is no limit.
        for bad in ["-1", "NaN", "inf", "1e-300", "x"] {
            assert!(parse("--rate-limit", bad).is_err(), "{bad}");
        }
        for bad in ["0", "0.5", "-3", "NaN"] {
            assert!(parse("--rate-burst", bad).is_err(), "{bad}");
        }
        for good in ["0", "0.001", "1000", "1e9"] {
            assert!(parse("--rate-limit", good).is_ok(), "{good}");
        }
        // 0 workers, a tick of 0 s, no delivery in flight: each was taken as 1 in silence.
        for (flag, bad, good) in [
            ("--workers", ["0", "65"], "64"),
            ("--schedule-tick", ["0", "86401"], "1"),
            ("--delivery-concurrency", ["0", "10001"], "1"),
        ] {
            for bad in bad {
                assert!(parse(flag, bad).is_err(), "{flag} {bad}");
            }
            assert!(parse(flag, good).is_ok(), "{flag} {good}");
        }
        // A token's lifetime: a day by default, at most 366 days (a huge one wrapped its
        // `exp` into the past).
        let token = |ttl: &str| {
            crate::cli::Cli::try_parse_from(["standalone", "token", "--tenant", "t", "--ttl", ttl])
        };
        for bad in ["0", "-5", "9223372036854775807", "31622401"] {
            assert!(token(bad).is_err(), "{bad}");
        }
        assert!(token("31622400").is_ok());
        // A retention below 14 days is refused naming its flag.
        let e = parse("--retain-price-history-days", "13").expect_err("refused");
        assert!(e.to_string().contains("--retain-price-history-days"), "{e}");
        assert!(parse("--retain-price-history-days", "0").is_ok());
        assert!(parse("--retain-events-days", "36501").is_err());
    }
}
