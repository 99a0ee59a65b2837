//! `load`: measures the accepted-entries rate of a running service.
//!
//! Creates its own project and instance, registers a product and items, then sends
//! `--requests` batches of `--batch` itemSale entries (unique transaction ids) from
//! `--concurrency` senders, and prints entries/s and request latency percentiles.
//! Only loopback targets are sensible here; it stops by itself after the bounded run.
//!
//! `--rate R --duration S` sends at a fixed rate instead (open loop: a request is sent at
//! its scheduled time whether or not earlier ones have been answered, and its latency is
//! counted from that time, so a stalled server shows in the percentiles). `--setup-only`
//! creates the project, instance and items and prints the entries path for another load
//! tool (`infra/load/one-entry.sh` runs wrk with it).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(about = "Load generator for POST .../entries")]
struct Args {
    /// Base URL of the service.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token (e.g. from `standalone token --tenant load`).
    #[arg(long, env = "TOKEN")]
    token: String,
    /// Entries per request.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Requests to send in all.
    #[arg(long, default_value_t = 400)]
    requests: usize,
    /// Concurrent senders.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Items to spread sales over.
    #[arg(long, default_value_t = 100)]
    items: usize,
    /// Fixed request rate (requests/s, open loop) for `--duration` seconds instead of
    /// `--requests` as fast as the senders go.
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of a `--rate` run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Set up the project, instance and items, print `ENTRIES_URL_PATH=...` and stop.
    #[arg(long)]
    setup_only: bool,
    /// With `--rate`: write each request's scheduled time and latency (milliseconds from
    /// the start, one request a line, in schedule order) to this file, to see when the
    /// slow ones were sent.
    #[arg(long)]
    latencies: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(if args.rate.is_some() {
            256
        } else {
            args.concurrency
        })
        .timeout(Duration::from_secs(60))
        .build()?;
    let run = format!("load-{}", std::process::id());
    let project = format!("{}/projects/{run}", args.url);
    post(
        &client,
        &args,
        &format!("{}/projects", args.url),
        json!({"projectId": run}),
    )
    .await?;
    post(
        &client,
        &args,
        &format!("{project}/instances"),
        json!({"instanceId": "i"}),
    )
    .await?;
    let entries_url = format!("{project}/instances/i/entries");
    let mut setup = vec![
        json!({"type": "productRegistration", "data": {"productId": "p", "capacity": 100_000_000u64}}),
    ];
    for i in 0..args.items {
        setup.push(json!({"type": "itemRegistration", "data": {"itemId": format!("item-{i}"), "productId": "p",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 200, "default": 49.9}}}));
    }
    post(&client, &args, &entries_url, json!({ "entries": setup })).await?;
    if args.setup_only {
        println!("ENTRIES_URL_PATH=/projects/{run}/instances/i/entries");
        return Ok(());
    }
    if let Some(rate) = args.rate {
        return fixed_rate(client, &args, &run, &entries_url, rate).await;
    }

    // Bodies are built up front so the generator measures the server, not itself.
    let bodies: Arc<Vec<String>> = Arc::new(
        (0..args.requests)
            .map(|r| body(&run, r, args.batch, args.items))
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, bodies, next, url, token) = (
            client.clone(),
            bodies.clone(),
            next.clone(),
            entries_url.clone(),
            args.token.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut accepted = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                let t = Instant::now();
                let resp = client
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await?;
                let status = resp.status();
                let v: Value = resp.json().await?;
                if !status.is_success() {
                    return Err(format!("status {status}: {v}").into());
                }
                accepted += v["accepted"].as_u64().unwrap_or(0);
                latencies.push(t.elapsed());
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((accepted, latencies))
        }));
    }
    let mut accepted = 0;
    let mut latencies = Vec::new();
    for t in tasks {
        let (a, l) = t.await?.map_err(|e| e.to_string())?;
        accepted += a;
        latencies.extend(l);
    }
    let elapsed = start.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "{} requests x {} entries, concurrency {}: {accepted} accepted in {:.2} s = {:.0} entries/s; latency p50 {:?} p99 {:?} max {:?}",
        args.requests,
        args.batch,
        args.concurrency,
        elapsed.as_secs_f64(),
        accepted as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        latencies.last().copied().unwrap_or_default(),
    );
    Ok(())
}

/// The body of request `r` of a run: `batch` itemSales with unique transaction ids.
fn body(run: &str, r: usize, batch: usize, items: usize) -> String {
    let entries: Vec<Value> = (0..batch)
        .map(|i| json!({"type": "itemSale", "transactionId": format!("{run}-{r}-{i}"),
            "data": {"itemId": format!("item-{}", (r * batch + i) % items), "quantity": 1, "price": 49.9}}))
        .collect();
    json!({ "entries": entries }).to_string()
}

/// Open loop at `rate` requests/s: request `n` is due at `n / rate` s; its latency counts
/// from then. Requests still unanswered when the next are due are sent beside them (at
/// most 1,024 in flight; past that, a due request is counted as missed).
async fn fixed_rate(
    client: reqwest::Client,
    args: &Args,
    run: &str,
    url: &str,
    rate: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    const MAX_IN_FLIGHT: usize = 1_024;
    let total = (rate * args.duration).round() as usize;
    let bodies: Vec<String> = (0..total)
        .map(|r| body(run, r, args.batch, args.items))
        .collect();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let start = Instant::now();
    let mut missed = 0usize;
    for (n, body) in bodies.into_iter().enumerate() {
        let due = start + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            missed += 1;
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (client, url, token, in_flight, done) = (
            client.clone(),
            url.to_owned(),
            args.token.clone(),
            in_flight.clone(),
            done_tx.clone(),
        );
        tokio::spawn(async move {
            let sent = client
                .post(&url)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            let ok = match sent {
                Ok(resp) => resp.status().is_success() && resp.bytes().await.is_ok(),
                Err(_) => false,
            };
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let _ = done.send((ok, n, due.elapsed()));
        });
    }
    drop(done_tx);
    let mut latencies = Vec::with_capacity(total);
    let mut failed = 0usize;
    let mut timeline = Vec::with_capacity(total);
    while let Some((ok, n, latency)) = done_rx.recv().await {
        if !ok {
            failed += 1;
        }
        latencies.push(latency);
        timeline.push((n, latency));
    }
    let elapsed = start.elapsed();
    if let Some(path) = &args.latencies {
        timeline.sort();
        let lines: String = timeline
            .iter()
            .map(|(n, latency)| {
                format!(
                    "{:.3} {:.3}\n",
                    *n as f64 * 1e3 / rate,
                    latency.as_secs_f64() * 1e3
                )
            })
            .collect();
        std::fs::write(path, lines)?;
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "fixed rate {rate:.0} requests/s x {} entries for {:.1} s: {} answered ({failed} failed, {missed} not sent: {MAX_IN_FLIGHT} in flight) in {:.2} s = {:.0} requests/s; latency from the scheduled time p50 {:?} p90 {:?} p99 {:?} p99.9 {:?} max {:?}",
        args.batch,
        args.duration,
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(0.999),
        latencies.last().copied().unwrap_or_default(),
    );
    if failed > 0 || missed > 0 {
        return Err(format!("{failed} requests failed, {missed} not sent").into());
    }
    Ok(())
}

async fn post(
    client: &reqwest::Client,
    args: &Args,
    url: &str,
    body: Value,
) -> Result<(), Box<dyn std::error::Error>> {
    let resp = client
        .post(url)
        .bearer_auth(&args.token)
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(format!("{url}: {} {}", resp.status(), resp.text().await?).into());
    }
    Ok(())
}
