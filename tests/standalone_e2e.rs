//! End-to-end: the real `standalone` binary over HTTP. Submits entries under load, kills the
//! process with SIGKILL mid-load, restarts it on the same data directory, and shows that
//! nothing accepted was lost or applied twice.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Service, send, token, wait_for};

fn sale_batch(batch: usize, size: usize) -> Value {
    let entries: Vec<Value> = (0..size)
        .map(|i| {
            json!({"type": "itemSale", "transactionId": format!("sale-{batch}-{i}"),
                   "data": {"itemId": format!("item-{}", i % 4), "quantity": 1, "price": 25.5}})
        })
        .collect();
    json!({ "entries": entries })
}

async fn wait_until_applied(client: &reqwest::Client, base: &str, token: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, details) = send(
            client,
            reqwest::Method::GET,
            format!("{base}/projects/e2e/instances/show"),
            token,
            None,
        )
        .await
        .expect("details");
        assert_eq!(status, 200, "{details}");
        let p = &details["processing"];
        if p["appliedSequence"] == p["lastSequence"] {
            return details;
        }
        assert!(
            Instant::now() < deadline,
            "processing did not catch up: {p}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_accepted_is_lost_or_applied_twice_across_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut service = Service::start(&data);
    assert!(
        service
            .stdout_lines
            .iter()
            .any(|l| l.contains("client_secret=")),
        "the first start prints the local client: {:?}",
        service.stdout_lines
    );
    let token = token(&data, "e2e-tenant");
    let client = reqwest::Client::new();
    let base = service.base.clone();
    use reqwest::Method;

    let (s, _) = send(
        &client,
        Method::POST,
        format!("{base}/projects"),
        &token,
        Some(json!({"projectId": "e2e"})),
    )
    .await
    .unwrap();
    assert_eq!(s, 201);
    let (s, _) = send(
        &client,
        Method::POST,
        format!("{base}/projects/e2e/instances"),
        &token,
        Some(json!({"instanceId": "show"})),
    )
    .await
    .unwrap();
    assert_eq!(s, 201);
    let mut setup = vec![
        json!({"type": "productRegistration", "transactionId": "prod", "data": {"productId": "ga", "capacity": 100000}}),
    ];
    for i in 0..4 {
        setup.push(
            json!({"type": "itemRegistration", "transactionId": format!("reg-{i}"), "data": {
            "itemId": format!("item-{i}"), "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 100, "default": 25.5}}}),
        );
    }
    let (s, body) = send(
        &client,
        Method::POST,
        format!("{base}/projects/e2e/instances/show/entries"),
        &token,
        Some(json!({"entries": setup})),
    )
    .await
    .unwrap();
    assert_eq!(s, 200, "{body}");

    // Load: 4 concurrent senders of 100-entry batches; SIGKILL once some are acknowledged.
    const BATCHES: usize = 60;
    const SIZE: usize = 100;
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut senders = Vec::new();
    for lane in 0..4 {
        let client = client.clone();
        let base = base.clone();
        let token = token.clone();
        let acked = acked.clone();
        senders.push(tokio::spawn(async move {
            for batch in (lane..BATCHES).step_by(4) {
                let url = format!("{base}/projects/e2e/instances/show/entries");
                match send(
                    &client,
                    Method::POST,
                    url,
                    &token,
                    Some(sale_batch(batch, SIZE)),
                )
                .await
                {
                    Ok((200, _)) => acked.lock().unwrap().push(batch),
                    Ok((status, body)) => panic!("unexpected {status}: {body}"),
                    Err(_) => return, // the service died under us
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 8 {
        assert!(Instant::now() < deadline, "no batches acknowledged");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    service.kill9();
    for s in senders {
        s.await.expect("sender");
    }
    let acked: Vec<usize> = acked.lock().unwrap().clone();
    assert!(acked.len() < BATCHES, "the kill landed mid-load");

    // Restart on the same data. Everything acknowledged before the kill must be there:
    // resending an acknowledged batch yields only duplicates.
    let mut service = Service::start(&data);
    assert!(
        !service
            .stdout_lines
            .iter()
            .any(|l| l.contains("client_secret=")),
        "the client is created once"
    );
    let base = service.base.clone();
    for batch in 0..BATCHES {
        let (s, body) = send(
            &client,
            Method::POST,
            format!("{base}/projects/e2e/instances/show/entries"),
            &token,
            Some(sale_batch(batch, SIZE)),
        )
        .await
        .unwrap();
        assert_eq!(s, 200, "{body}");
        if acked.contains(&batch) {
            assert_eq!(
                body["accepted"], 0,
                "batch {batch} was acknowledged before the kill but lost: {body}"
            );
            assert_eq!(body["duplicates"], SIZE);
        }
    }

    // Every sale applied exactly once.
    let details = wait_until_applied(&client, &base, &token).await;
    let total_sold: u64 = details["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sold"].as_u64().unwrap())
        .sum();
    assert_eq!(total_sold, (BATCHES * SIZE) as u64, "{details}");
    assert_eq!(
        details["processing"]["lastSequence"],
        (BATCHES * SIZE + 5) as u64
    );
    for item in details["items"].as_array().unwrap() {
        assert_eq!(item["sold"], (BATCHES * SIZE / 4) as u64);
    }

    // The log is gapless and holds each transaction id once.
    let mut seen = std::collections::HashSet::new();
    let mut after = 0u64;
    loop {
        let (s, page) = send(
            &client,
            Method::GET,
            format!("{base}/projects/e2e/instances/show/entries?after={after}&limit=1000"),
            &token,
            None,
        )
        .await
        .unwrap();
        assert_eq!(s, 200);
        for e in page["items"].as_array().unwrap() {
            after += 1;
            assert_eq!(e["sequence"], after, "gapless sequences");
            assert!(
                seen.insert(e["transactionId"].as_str().unwrap().to_owned()),
                "duplicate in the log"
            );
        }
        if page["next"].is_null() {
            break;
        }
    }
    assert_eq!(seen.len(), BATCHES * SIZE + 5);

    let status = service.terminate();
    assert!(status.success(), "graceful exit on SIGTERM: {status:?}");
}

#[tokio::test]
async fn oauth_client_credentials_and_token_subcommand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start(&data);
    let find = |prefix: &str| {
        service
            .stdout_lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {prefix} in {:?}", service.stdout_lines))
    };
    let (client_id, secret) = (find("client_id="), find("client_secret="));
    let client = reqwest::Client::new();
    let form = |secret: &str| {
        format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}")
    };
    let resp = client
        .post(format!("{}/oauth2/token", service.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&secret))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    let access = body["access_token"].as_str().unwrap().to_owned();
    let resp = client
        .get(format!("{}/projects", service.base))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = client
        .post(format!("{}/oauth2/token", service.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
    // The token subcommand's tokens work against the running service too.
    let t = token(&data, "cli-tenant");
    let resp = client
        .get(format!("{}/projects", service.base))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in ["clients.json", "token-secret", "signing-keys.json"] {
            let mode = std::fs::metadata(data.join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_on_demand_on_sales_thresholds_and_on_schedule() {
    use reqwest::Method;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "pricing");
    let client = reqwest::Client::new();
    let base = service.base.clone();
    let (s, _) = send(
        &client,
        Method::POST,
        format!("{base}/projects"),
        &token,
        Some(json!({"projectId": "shop"})),
    )
    .await
    .unwrap();
    assert_eq!(s, 201);
    let entries = |step: u32| {
        json!({"entries": [
            {"type": "pricingSchedule", "data": {"interval": "P1D"}},
            {"type": "productRegistration", "data": {"productId": "ga", "capacity": 10,
                "pricingModel": {"type": "tiers", "tiers": [{"upToSoldPercent": 10, "multiplier": 1}, {"multiplier": 1.5}]},
                "recalculation": {"soldPercentStep": step}}},
            {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 40}}},
        ]})
    };
    // `gig` is active (scheduled pricing on); `off` is not.
    for (id, active) in [("gig", true), ("off", false)] {
        let (s, _) = send(
            &client,
            Method::POST,
            format!("{base}/projects/shop/instances"),
            &token,
            Some(json!({"instanceId": id, "active": active})),
        )
        .await
        .unwrap();
        assert_eq!(s, 201);
        let (s, b) = send(
            &client,
            Method::POST,
            format!("{base}/projects/shop/instances/{id}/entries"),
            &token,
            Some(entries(10)),
        )
        .await
        .unwrap();
        assert_eq!(s, 200, "{b}");
    }
    let history_url = format!("{base}/projects/shop/instances/gig/items/a/priceHistory");
    let with = |trigger: &'static str| {
        move |b: &Value| {
            b["items"]
                .as_array()
                .is_some_and(|items| items.iter().any(|e| e["trigger"] == trigger))
        }
    };
    let count = |b: &Value, trigger: &str| {
        b["items"].as_array().map_or(0, |items| {
            items.iter().filter(|e| e["trigger"] == trigger).count()
        })
    };

    // The schedule (one slot a day here) prices the active instance once.
    wait_for(
        &client,
        &history_url,
        &token,
        "a scheduled calculation",
        with("schedule"),
    )
    .await;

    // On demand, with metadata.
    let (s, b) = send(
        &client,
        Method::POST,
        format!("{base}/projects/shop/calculatePrices"),
        &token,
        Some(json!({"metadata": {"batch": 1}})),
    )
    .await
    .unwrap();
    assert_eq!(s, 202, "{b}");
    assert_eq!(
        b["calculations"].as_array().map(Vec::len),
        Some(2),
        "all instances of the project"
    );
    let calculation = b["calculations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["instanceId"] == "gig")
        .unwrap()["calculationId"]
        .as_str()
        .unwrap()
        .to_owned();
    let prices_url = format!("{base}/projects/shop/instancePrices?instanceId=gig");
    let prices = wait_for(
        &client,
        &prices_url,
        &token,
        "the requested calculation",
        |b| b["items"][0]["calculationId"] == calculation.as_str(),
    )
    .await;
    assert_eq!(
        prices["items"][0]["prices"],
        json!([{"itemId": "a", "price": 40.0}])
    );

    // A sale crossing 10 % sold triggers a calculation by itself; the tier rises to 1.5.
    let sale = json!({"entries": [{"type": "itemSale", "data": {"itemId": "a", "quantity": 2, "price": 40}}]});
    let (s, _) = send(
        &client,
        Method::POST,
        format!("{base}/projects/shop/instances/gig/entries"),
        &token,
        Some(sale),
    )
    .await
    .unwrap();
    assert_eq!(s, 200);
    let history = wait_for(
        &client,
        &history_url,
        &token,
        "a sales-triggered calculation",
        with("sales"),
    )
    .await;
    let sales = history["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["trigger"] == "sales")
        .unwrap()
        .clone();
    assert_eq!(sales["price"], 60.0, "{sales}");
    assert_eq!(sales["previousPrice"], 40.0);
    assert_eq!(count(&history, "request"), 1);

    // However often the scheduler ticks, one run per slot; the inactive instance gets none.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (_, again) = send(&client, Method::GET, history_url.clone(), &token, None)
        .await
        .unwrap();
    assert_eq!(count(&again, "schedule"), 1, "{again}");
    let (_, off) = send(
        &client,
        Method::GET,
        format!("{base}/projects/shop/instances/off/items/a/priceHistory"),
        &token,
        None,
    )
    .await
    .unwrap();
    assert_eq!(count(&off, "schedule"), 0, "{off}");
    assert_eq!(count(&off, "request"), 1, "{off}");
}
