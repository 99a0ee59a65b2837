//! Webhook delivery in the standalone process: a pool of concurrent attempts fed by the
//! durable webhooks lane of the embedded queue, the key file watcher, and key rotation.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pricing_core::jws::Signer;
use pricing_core::ports::{Received, WorkQueue};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::Settle;
use pricing_embedded::EmbeddedStore;
use pricing_http::HttpTransport;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::Error;
use crate::cli::RotateKeysArgs;

/// How long a webhook message stays hidden while it is attempted (the POST times out
/// after 15 s).
const VISIBILITY: Duration = Duration::from_secs(60);
/// How often the key file is looked at for a rotation made by another process.
pub const KEY_RELOAD: Duration = Duration::from_secs(30);

/// Runs the delivery pool until `shutdown`; attempts in progress are finished first.
pub async fn run(
    store: EmbeddedStore,
    transport: Arc<HttpTransport>,
    signer: Arc<Signer>,
    concurrency: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let queue = store.webhook_queue();
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut tasks = JoinSet::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        while tasks.try_join_next().is_some() {}
        let free = permits.available_permits();
        if free == 0 {
            tokio::select! {
                _ = tasks.join_next() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        let received = match queue.receive(free.min(64), VISIBILITY).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "receiving webhooks failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if received.is_empty() {
            tokio::select! {
                _ = queue.wait_for_work(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        for r in received {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let (store, transport, signer) = (store.clone(), transport.clone(), signer.clone());
            tasks.spawn(async move {
                attempt(&store, &transport, &signer, r).await;
                drop(permit);
            });
        }
    }
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(20), drain)
        .await
        .is_err()
    {
        tracing::warn!("webhook attempts still running at shutdown; they will be redelivered");
    }
}

/// One message of the webhooks lane, handled and settled.
async fn attempt(store: &EmbeddedStore, transport: &HttpTransport, signer: &Signer, r: Received) {
    let queue = store.webhook_queue();
    let outcome = pricing_api::metrics::handle_webhook(
        store,
        store,
        transport,
        signer,
        &r.message,
        Timestamp::now(),
    )
    .await;
    let settled = match outcome {
        Ok(Settle::Done) => queue.ack(&r.receipt).await,
        Ok(Settle::RetryIn(delay)) => queue.retry_later(&r.receipt, delay).await,
        Ok(Settle::DeadLetter) => {
            // No dead-letter queue here: the failure is kept on the delivery (its log).
            match &r.message {
                pricing_core::model::Message::Deliver { webhook_id } => tracing::warn!(
                    webhook = %webhook_id,
                    "webhook failed for good; kept in its delivery log"
                ),
                other => tracing::warn!(
                    message = ?other,
                    "webhook failed for good; kept in its delivery log"
                ),
            }
            queue.ack(&r.receipt).await
        }
        Err(e) => {
            let delay = crate::worker::backoff(r.receive_count);
            tracing::warn!(error = %e, attempt = r.receive_count, ?delay, "webhook work failed; will retry");
            queue.retry_later(&r.receipt, delay).await
        }
    };
    if let Err(e) = settled {
        // The message reappears after its visibility timeout: nothing is lost.
        tracing::warn!(error = %e, "could not settle a webhook message");
    }
}

/// Reloads the signing keys when the key file changes (a `rotate-keys` run), so the
/// running service publishes and uses the new set.
pub async fn watch_keys(
    dir: std::path::PathBuf,
    signer: Arc<Signer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let file = dir.join(pricing_embedded::keys::SIGNING_KEYS_FILE);
    // Time, length and inode: two rotations within a coarse timestamp's tick (a second on
    // some file systems) still differ, each rename being a new inode.
    let modified = |f: &std::path::Path| -> Option<(SystemTime, u64, u64)> {
        let m = std::fs::metadata(f).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let inode = 0;
        Some((m.modified().ok()?, m.len(), inode))
    };
    let mut seen = modified(&file);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(KEY_RELOAD) => {}
            _ = shutdown.changed() => return,
        }
        let now = modified(&file);
        if now == seen {
            continue;
        }
        seen = now;
        match pricing_embedded::keys::read_signing_keys(&dir) {
            Ok(Some(keys)) => match signer.replace_keys(&keys) {
                Ok(()) => tracing::info!(keys = keys.len(), "signing keys reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "the key file holds no usable key set; keeping the current one")
                }
            },
            Ok(None) => tracing::error!("the key file disappeared; keeping the current keys"),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the key file; keeping the current keys")
            }
        }
    }
}

/// `standalone rotate-keys`.
pub fn rotate_keys(args: &RotateKeysArgs) -> Result<(), Error> {
    // Keys are rotated where a service keeps them: a directory that does not exist (a
    // mistyped --data) was made, with keys no service uses, and the command said it
    // rotated.
    if !args.data.is_dir() {
        return Err(Error::Setup(format!(
            "data directory {} does not exist: rotate-keys works on a service's data directory",
            args.data.display()
        )));
    }
    let made = if args.new_key_set {
        pricing_embedded::keys::new_signing_keys(&args.data)
    } else {
        pricing_embedded::keys::rotate_signing_keys(&args.data)
    };
    let keys = made.map_err(|e| match e {
        pricing_embedded::EmbeddedError::Missing { path } => Error::Setup(format!(
            "{} does not exist: rotate-keys rotates the keys a service has. If the file was \
             lost, restore it from a backup; `rotate-keys --new-key-set` makes a new set \
             instead (the entries signed by the lost keys will no longer verify)",
            path.display()
        )),
        e => Error::Setup(format!("signing keys: {e}")),
    })?;
    let listed: String = keys
        .iter()
        .map(|k| {
            // A key retired long ago keeps only its public point (it verifies, never signs).
            let kept = if k.pkcs8.is_none() {
                " (public key only)"
            } else {
                ""
            };
            format!("{} {:?}{kept}\n", k.kid, k.status)
        })
        .collect();
    crate::write_stdout(&listed)
}
