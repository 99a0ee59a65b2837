//! `standalone serve`: wires the embedded adapters to the API router and the workers.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use pricing_api::auth::{Authenticator, LocalTokens, RateLimiter};
use pricing_api::{App, Stores};
use pricing_core::jws::Signer;
use pricing_core::process::Processor;
use pricing_core::webhooks::CallbackPolicy;
use pricing_embedded::EmbeddedStore;
use pricing_http::HttpTransport;
use tokio::sync::watch;

use crate::Error;
use crate::cli::{CallbackPolicyArg, ServeArgs};
use crate::datadir::{Clients, ensure_dir, token_secret};
use crate::oauth::{self, TokenEndpoint};

const DATABASE_FILE: &str = "pricing.db";

pub async fn run(args: ServeArgs) -> Result<(), Error> {
    ensure_dir(&args.data)?;
    let keys = pricing_embedded::keys::load_or_create_signing_keys(&args.data)
        .map_err(|e| Error::Setup(format!("signing keys: {e}")))?;
    let signer = Arc::new(Signer::from_keys(&keys).map_err(|e| Error::Setup(e.to_string()))?);
    let tokens = Arc::new(LocalTokens::new(&token_secret(&args.data)?));
    let (clients, created) = Clients::load_or_create(&args.data)?;
    let store = EmbeddedStore::open(&args.data.join(DATABASE_FILE))
        .map_err(|e| Error::Setup(format!("database: {e}")))?;

    let ports = Stores {
        store: store.clone(),
        queue: store.clone(),
    };
    let policy = match args.callback_policy {
        CallbackPolicyArg::Local => CallbackPolicy::LOCAL,
        CallbackPolicyArg::Strict => CallbackPolicy::STRICT,
    };
    let transport = Arc::new(
        HttpTransport::new(policy).map_err(|e| Error::Setup(format!("HTTP client: {e}")))?,
    );
    let auth: Arc<dyn Authenticator> = tokens.clone();
    let app = App::new(ports, signer.clone(), auth)
        .with_rate_limit(RateLimiter::new(args.rate_limit, args.rate_burst))
        .with_callback_policy(policy);
    let router = pricing_api::router(Arc::new(app))
        .merge(oauth::router(Arc::new(TokenEndpoint { tokens, clients })));

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
    let processor = Arc::new(Processor::new());
    let workers: Vec<_> = (0..args.workers.max(1))
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
        args.delivery_concurrency,
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
        Duration::from_secs(args.schedule_tick.max(1)),
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
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
    }
    tracing::info!(%addr, data = %args.data.display(), "service started");

    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })?;

    tracing::info!("shutting down: finishing work in progress");
    let _ = stop.send(true);
    let _ = scheduler.await;
    let _ = key_watch.await;
    let _ = deliveries.await;
    for w in workers {
        if tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .is_err()
        {
            tracing::warn!("a worker did not stop in time; its message will be redelivered");
        }
    }
    tracing::info!("stopped");
    Ok(())
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
