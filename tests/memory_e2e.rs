//! Memory of a large instance (issue 12, item 2): the real `standalone` binary with an
//! instance of 100,000 items (100 products of 1,000, the default model), a webhook
//! subscription to a receiver in this test, then repeated calculations (each delivered as
//! `prices.updated` parts), and the large reads (instance details, every instancePrices
//! page, item pages, price histories). Reports the service's RSS (VmRSS) and peak RSS
//! (VmHWM) after each step, and the data directory's growth per calculation. A
//! measurement: it asserts what must hold (every price and part arrives) but no memory
//! bound.
//!
//! `cargo test --release -p standalone --test memory_e2e -- --ignored --nocapture`
//! (env `ITEMS`, default 100000; `CALCULATIONS`, default 4; `STANDALONE_BIN`, another
//! build of the binary to measure, e.g. a copy of an earlier release build)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// (VmRSS, VmHWM, RssAnon) of a process, in MB. RssAnon is the heap (RssFile, the rest,
/// is mapped files and shared pages).
fn rss(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("a /proc status field")
            / 1024
    };
    (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"))
}

/// Bytes of every file in the data directory (the database, its WAL, keys).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("data dir")
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The binary measured: `STANDALONE_BIN` or this package's build.
fn binary() -> String {
    std::env::var("STANDALONE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_standalone").into())
}

/// The service on `data`: (process, base URL). Its stdout is drained by a thread.
fn start(data: &std::path::Path) -> (support::KillOnDrop, String) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start standalone");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let base = loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).expect("read stdout") > 0,
            "the service exited early"
        );
        if let Some(addr) = line.trim().strip_prefix("listening on ") {
            break addr.to_owned();
        }
    };
    std::thread::spawn(move || for _ in reader.lines() {});
    (support::KillOnDrop(child), base)
}

fn token(data: &std::path::Path, tenant: &str) -> String {
    let out = std::process::Command::new(binary())
        .args(["token", "--tenant", tenant, "--data"])
        .arg(data)
        .output()
        .expect("token subcommand");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .last()
        .expect("a token line")
        .to_owned()
}

mod support {
    /// Kills the service when the test ends, however it ends.
    pub struct KillOnDrop(pub std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        let text = response.text().await.expect("body");
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn get(&self, path: &str) -> Value {
        self.send(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --release --ignored --nocapture"]
async fn large_instance_memory() {
    let items = env_or("ITEMS", 100_000);
    let calculations = env_or("CALCULATIONS", 4);
    let per_product = 1_000.min(items);
    let products = items.div_ceil(per_product);

    // The webhook receiver: counts parts and prices.
    let parts = Arc::new(AtomicUsize::new(0));
    let prices = Arc::new(AtomicUsize::new(0));
    let (p, q) = (parts.clone(), prices.clone());
    let receiver = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let (p, q) = (p.clone(), q.clone());
        async move {
            let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if event["type"] == "prices.updated" {
                p.fetch_add(1, Ordering::Relaxed);
                let n = event["data"]["prices"].as_array().map_or(0, Vec::len);
                q.fetch_add(n, Ordering::Relaxed);
            }
            axum::http::StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (service, base) = start(&data);
    let pid = service.0.id();
    let api = Api {
        http: reqwest::Client::new(),
        base,
        token: token(&data, "memory"),
    };
    let report = |step: &str| {
        let (now, peak, anon) = rss(pid);
        println!(
            "{step:<58} RSS {now:>5} MB (heap {anon:>5}), peak {peak:>5} MB, data dir {:>6.1} MB",
            dir_bytes(&data) as f64 / 1e6
        );
    };
    report("started");

    api.post("/projects", &json!({"projectId": "mem"})).await;
    api.post("/projects/mem/instances", &json!({"instanceId": "big"}))
        .await;
    api.post(
        "/projects/mem/instances/big/subscriptions",
        &json!({"callbackUrl": format!("http://{addr}/hooks")}),
    )
    .await;

    // Registrations in requests of 1,000 entries: the products, then their items.
    let entries = "/projects/mem/instances/big/entries";
    let registrations: Vec<Value> = (0..products)
        .map(|p| {
            json!({"type": "productRegistration", "transactionId": format!("p{p}"),
                   "data": {"productId": format!("prod-{p:03}"), "capacity": per_product * 2}})
        })
        .collect();
    for chunk in registrations.chunks(1_000) {
        api.post(entries, &json!({ "entries": chunk })).await;
    }
    let started = Instant::now();
    for p in 0..products {
        let batch: Vec<Value> = (0..per_product)
            .map(|i| {
                let n = p * per_product + i;
                json!({"type": "itemRegistration", "transactionId": format!("i{n}"),
                       "data": {"itemId": format!("item-{n:06}"), "productId": format!("prod-{p:03}"),
                                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
                                "priceSettings": {"min": 10, "max": 200, "default": 40 + (n % 50)}}})
            })
            .collect();
        api.post(entries, &json!({ "entries": batch })).await;
    }
    // A sale on every tenth item, so the calculations have something to move prices.
    let sales: Vec<Value> = (0..items)
        .step_by(10)
        .map(|n| {
            json!({"type": "itemSale", "transactionId": format!("s{n}"),
                   "data": {"itemId": format!("item-{n:06}"), "quantity": 1, "price": 45}})
        })
        .collect();
    for chunk in sales.chunks(1_000) {
        api.post(entries, &json!({ "entries": chunk })).await;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let details = api.get("/projects/mem/instances/big").await;
        let p = &details["processing"];
        if p["appliedSequence"] == p["lastSequence"] {
            break;
        }
        assert!(Instant::now() < deadline, "processing did not catch up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    report(&format!(
        "{items} items registered and applied ({:.1} s)",
        started.elapsed().as_secs_f64()
    ));

    let parts_per_calc = items.div_ceil(1_000);
    for round in 1..=calculations {
        let before = dir_bytes(&data);
        let started = Instant::now();
        let answer = api
            .post(
                "/projects/mem/calculatePrices",
                &json!({"instanceIds": ["big"], "metadata": {"round": round}}),
            )
            .await;
        let calculation = answer["calculations"][0]["calculationId"]
            .as_str()
            .expect("a calculation id")
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(600);
        while parts.load(Ordering::Relaxed) < parts_per_calc * round {
            assert!(
                Instant::now() < deadline,
                "calculation {round}: {} parts delivered",
                parts.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let latest = api
            .get("/projects/mem/instancePrices?instanceId=big&limit=1")
            .await;
        assert_eq!(latest["items"][0]["calculationId"], calculation.as_str());
        // Let the checkpoint settle before measuring the data directory.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        report(&format!(
            "calculation {round} stored and delivered ({:.1} s, +{:.1} MB)",
            started.elapsed().as_secs_f64(),
            (dir_bytes(&data) as f64 - before as f64) / 1e6
        ));
    }
    assert_eq!(prices.load(Ordering::Relaxed), items * calculations);

    // The large reads.
    let started = Instant::now();
    let details = api.get("/projects/mem/instances/big").await;
    assert!(details["items"].as_array().is_some_and(|a| !a.is_empty()));
    report(&format!(
        "instance details read ({:.2} s)",
        started.elapsed().as_secs_f64()
    ));
    let (mut listed, mut pages, started) = (0, 0, Instant::now());
    let mut cursor: Option<String> = None;
    loop {
        pages += 1;
        let path = match &cursor {
            None => "/projects/mem/instancePrices?instanceId=big".to_owned(),
            Some(c) => format!("/projects/mem/instancePrices?instanceId=big&cursor={c}"),
        };
        let page = api.get(&path).await;
        listed += page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["prices"].as_array().map_or(0, Vec::len))
            .sum::<usize>();
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(listed, items);
    report(&format!(
        "every instancePrices page read ({pages} pages, {:.2} s)",
        started.elapsed().as_secs_f64()
    ));
    let (mut listed, mut pages, started) = (0, 0, Instant::now());
    let mut cursor: Option<String> = None;
    loop {
        pages += 1;
        let path = match &cursor {
            None => "/projects/mem/instances/big/items?limit=1000".to_owned(),
            Some(c) => format!("/projects/mem/instances/big/items?limit=1000&cursor={c}"),
        };
        let page = api.get(&path).await;
        listed += page["items"].as_array().expect("items").len();
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(listed, items);
    report(&format!(
        "every item summary page read ({pages} pages, {:.2} s)",
        started.elapsed().as_secs_f64()
    ));
    for n in (0..items).step_by(items / 20) {
        let history = api
            .get(&format!(
                "/projects/mem/instances/big/items/item-{n:06}/priceHistory"
            ))
            .await;
        assert!(!history["items"].as_array().expect("items").is_empty());
    }
    report("20 price histories read");
    drop(service);
}
