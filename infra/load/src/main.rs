//! `load`: measures the accepted-entries rate of a running service.
//!
//! Creates its own project and instance, registers a product and items, then sends
//! `--requests` batches of `--batch` itemSale entries (unique transaction ids) from
//! `--concurrency` senders, and prints entries/s and request latency percentiles.
//! Only loopback targets are sensible here; it stops by itself after the bounded run.

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
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
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

    // Bodies are built up front so the generator measures the server, not itself.
    let bodies: Arc<Vec<String>> = Arc::new(
        (0..args.requests)
            .map(|r| {
                let entries: Vec<Value> = (0..args.batch)
                    .map(|i| json!({"type": "itemSale", "transactionId": format!("{run}-{r}-{i}"),
                        "data": {"itemId": format!("item-{}", (r * args.batch + i) % args.items), "quantity": 1, "price": 49.9}}))
                    .collect();
                json!({ "entries": entries }).to_string()
            })
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
