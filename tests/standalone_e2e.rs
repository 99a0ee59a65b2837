//! End-to-end: the real `standalone` binary over HTTP, driven through the typed client
//! (`pricing-client`). Submits entries under load, kills the process with SIGKILL mid-load,
//! restarts it on the same data directory, and shows that nothing accepted was lost or
//! applied twice.

mod support;
#[path = "support/client.rs"]
mod support_client;

use std::time::{Duration, Instant};

use pricing_client::types::{
    CalculationRequest, Entry, EntrySubmission, InstanceDetails, InstanceRequest, ItemPrice,
    LogQuery, PageQuery, PriceHistoryEntry, ProjectRequest, Trigger,
};
use pricing_client::{Client, Error, TokenAuth};
use serde_json::json;
use support::{Service, token};
use support_client::{api, poll, poll_found};

fn sale_batch(batch: usize, size: usize) -> EntrySubmission {
    EntrySubmission::new((0..size).map(|i| {
        Entry::new(
            "itemSale",
            json!({"itemId": format!("item-{}", i % 4), "quantity": 1, "price": 25.5}),
        )
        .with_transaction(format!("sale-{batch}-{i}"))
    }))
}

async fn wait_until_applied(api: &Client) -> InstanceDetails {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let details = api.instance("e2e", "show").await.expect("details");
        let p = details.processing;
        if p.applied_sequence == p.last_sequence {
            return details;
        }
        assert!(
            Instant::now() < deadline,
            "processing did not catch up: {p:?}"
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
    let client = api(&service.base, &token);

    // The client checks each route's documented status: 201 here, 200 for entries.
    client
        .create_project(&ProjectRequest::id("e2e"))
        .await
        .expect("201");
    client
        .create_instance("e2e", &InstanceRequest::id("show"))
        .await
        .expect("201");
    let mut setup = vec![
        Entry::new(
            "productRegistration",
            json!({"productId": "ga", "capacity": 100000}),
        )
        .with_transaction("prod"),
    ];
    for i in 0..4 {
        setup.push(
            Entry::new(
                "itemRegistration",
                json!({"itemId": format!("item-{i}"), "productId": "ga",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 25.5}}),
            )
            .with_transaction(format!("reg-{i}")),
        );
    }
    client
        .submit_entries("e2e", "show", &EntrySubmission::new(setup))
        .await
        .expect("200");

    // Load: 4 concurrent senders of 100-entry batches; SIGKILL once some are acknowledged.
    const BATCHES: usize = 60;
    const SIZE: usize = 100;
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut senders = Vec::new();
    for lane in 0..4 {
        let client = client.clone();
        let acked = acked.clone();
        senders.push(tokio::spawn(async move {
            for batch in (lane..BATCHES).step_by(4) {
                match client
                    .submit_entries("e2e", "show", &sale_batch(batch, SIZE))
                    .await
                {
                    Ok(_) => acked.lock().unwrap().push(batch),
                    Err(Error::Transport(_)) => return, // the service died under us
                    Err(e) => panic!("unexpected {:?}: {e}", e.status()),
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
    let client = api(&service.base, &token);
    for batch in 0..BATCHES {
        let summary = client
            .submit_entries("e2e", "show", &sale_batch(batch, SIZE))
            .await
            .expect("200");
        if acked.contains(&batch) {
            assert_eq!(
                summary.accepted, 0,
                "batch {batch} was acknowledged before the kill but lost: {summary:?}"
            );
            assert_eq!(summary.duplicates, SIZE as u64);
        }
    }

    // Every sale applied exactly once.
    let details = wait_until_applied(&client).await;
    let total_sold: u64 = details.items.iter().map(|i| i.sold).sum();
    assert_eq!(total_sold, (BATCHES * SIZE) as u64, "{details:?}");
    assert_eq!(
        details.processing.last_sequence,
        (BATCHES * SIZE + 5) as u64
    );
    for item in &details.items {
        assert_eq!(item.sold, (BATCHES * SIZE / 4) as u64);
    }

    // The log is gapless and holds each transaction id once.
    let mut seen = std::collections::HashSet::new();
    let mut after = 0u64;
    loop {
        let page = client
            .entries(
                "e2e",
                "show",
                &LogQuery {
                    after: Some(after),
                    page: PageQuery::limit(1000),
                },
            )
            .await
            .expect("200");
        for e in &page.items {
            after += 1;
            assert_eq!(e.sequence, after, "gapless sequences");
            assert!(
                seen.insert(e.transaction_id.clone().expect("a transaction id")),
                "duplicate in the log"
            );
        }
        if page.next.is_none() {
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
    let anonymous = Client::builder(&service.base).build().expect("a client");
    let token_url = format!("{}/oauth2/token", service.base);
    // The client-credentials grant, as a form.
    let body = anonymous
        .request_token(&token_url, &client_id, &secret, TokenAuth::Form)
        .await
        .expect("200");
    assert_eq!(body.token_type, "Bearer");
    assert_eq!(body.expires_in, 3600);
    api(&service.base, &body.access_token)
        .projects(&PageQuery::default())
        .await
        .expect("200");
    match anonymous
        .request_token(&token_url, &client_id, "wrong", TokenAuth::Form)
        .await
    {
        Err(Error::OAuth { status, error }) => {
            assert_eq!(status, 401);
            assert_eq!(error.error, "invalid_client");
        }
        other => panic!("expected invalid_client: {other:?}"),
    }
    // The client exchanging its credentials by itself.
    let managed =
        Client::with_client_credentials(&service.base, &client_id, &secret).expect("a client");
    managed
        .create_project(&ProjectRequest::id("managed"))
        .await
        .expect("201");
    let bad =
        Client::with_client_credentials(&service.base, &client_id, "wrong").expect("a client");
    match bad.projects(&PageQuery::default()).await {
        Err(Error::OAuth { status: 401, error }) => assert_eq!(error.error, "invalid_client"),
        other => panic!("expected invalid_client: {other:?}"),
    }
    // Credentials as HTTP Basic (as on Cognito).
    let basic = Client::builder(&service.base)
        .client_credentials(&client_id, &secret)
        .token_auth(TokenAuth::Basic)
        .build()
        .expect("a client");
    basic.projects(&PageQuery::default()).await.expect("200");
    // The token subcommand's tokens work against the running service too.
    let t = token(&data, "cli-tenant");
    api(&service.base, &t)
        .projects(&PageQuery::default())
        .await
        .expect("200");
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
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "pricing");
    let client = api(&service.base, &token);
    client
        .create_project(&ProjectRequest::id("shop"))
        .await
        .expect("201");
    let entries = |step: u32| {
        EntrySubmission::new([
            Entry::new("pricingSchedule", json!({"interval": "P1D"})),
            Entry::new(
                "productRegistration",
                json!({"productId": "ga", "capacity": 10,
                "pricingModel": {"type": "tiers", "tiers": [{"upToSoldPercent": 10, "multiplier": 1}, {"multiplier": 1.5}]},
                "recalculation": {"soldPercentStep": step}}),
            ),
            Entry::new(
                "itemRegistration",
                json!({"itemId": "a", "productId": "ga",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 40}}),
            ),
        ])
    };
    // `gig` is active (scheduled pricing on); `off` is not.
    for (id, active) in [("gig", true), ("off", false)] {
        client
            .create_instance(
                "shop",
                &InstanceRequest {
                    active: Some(active),
                    ..InstanceRequest::id(id)
                },
            )
            .await
            .expect("201");
        client
            .submit_entries("shop", id, &entries(10))
            .await
            .expect("200");
    }
    let all = PageQuery::default();
    let history = || client.price_history("shop", "gig", "a", &all);
    let with = |trigger: Trigger| {
        move |p: &pricing_client::types::Page<PriceHistoryEntry>| {
            p.items.iter().any(|e| e.trigger == trigger)
        }
    };
    let count = |p: &pricing_client::types::Page<PriceHistoryEntry>, trigger: Trigger| {
        p.items.iter().filter(|e| e.trigger == trigger).count()
    };

    // The schedule (one slot a day here) prices the active instance once.
    // The registrations are applied after the 200: until then the item is a 404.
    poll_found("a scheduled calculation", history, with(Trigger::Schedule)).await;

    // On demand, with metadata: 202, a calculation for every instance of the project.
    let b = client
        .calculate_prices(
            "shop",
            &CalculationRequest {
                metadata: Some(json!({"batch": 1})),
                ..CalculationRequest::default()
            },
        )
        .await
        .expect("202");
    assert_eq!(b.calculations.len(), 2, "all instances of the project");
    let calculation = b
        .calculations
        .iter()
        .find(|c| c.instance_id == "gig")
        .unwrap()
        .calculation_id
        .clone();
    let prices = poll(
        "the requested calculation",
        || client.instance_prices("shop", Some("gig"), &all),
        |p| {
            p.items
                .first()
                .is_some_and(|i| i.calculation_id.as_deref() == Some(calculation.as_str()))
        },
    )
    .await;
    assert_eq!(
        prices.items[0].prices,
        vec![ItemPrice {
            item_id: "a".into(),
            price: 40.0
        }]
    );

    // A sale crossing 10 % sold triggers a calculation by itself; the tier rises to 1.5.
    let sale = Entry::new(
        "itemSale",
        json!({"itemId": "a", "quantity": 2, "price": 40}),
    );
    client
        .submit_entries("shop", "gig", &EntrySubmission::new([sale]))
        .await
        .expect("200");
    let history_page = poll(
        "a sales-triggered calculation",
        history,
        with(Trigger::Sales),
    )
    .await;
    let sales = history_page
        .items
        .iter()
        .find(|e| e.trigger == Trigger::Sales)
        .unwrap()
        .clone();
    assert_eq!(sales.price, 60.0, "{sales:?}");
    assert_eq!(sales.previous_price, Some(40.0));
    // The requested calculation left the price at 40: it is in instancePrices (above) but
    // adds no history entry (the history lists changes).
    assert_eq!(count(&history_page, Trigger::Request), 0);

    // However often the scheduler ticks, one run per slot; the inactive instance gets none.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again = history().await.expect("200");
    assert_eq!(count(&again, Trigger::Schedule), 1, "{again:?}");
    // Only `gig`'s requested calculation was waited for: `off`'s may still be running (and
    // its registrations unapplied, a 404), so wait for it rather than trust the sleep.
    let off = poll_found(
        "the inactive instance's requested calculation",
        || client.price_history("shop", "off", "a", &all),
        |p| count(p, Trigger::Request) > 0,
    )
    .await;
    assert_eq!(count(&off, Trigger::Schedule), 0, "{off:?}");
    assert_eq!(count(&off, Trigger::Request), 1, "{off:?}");
}

/// Every route of the API once through the typed client against the real binary: each
/// answer decodes into its documented type, with its documented status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_its_typed_body() {
    use pricing_client::types::{
        EventQuery, EventType, InstanceUpdate, PriceMatchRequest, SubscriptionRequest,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start(&data);
    let client = api(&service.base, &token(&data, "typed"));

    let health = client.health().await.expect("200");
    assert_eq!(
        (health.status.as_str(), health.api_version.as_str()),
        ("ok", "3.1.0")
    );
    assert!(client.openapi().await.expect("200")["paths"].is_object());
    assert!(
        !client
            .signature_verification_keys()
            .await
            .expect("200")
            .keys
            .is_empty()
    );

    let project = client
        .create_project(&ProjectRequest::id("all"))
        .await
        .expect("201");
    assert_eq!(client.project("all").await.expect("200"), project);
    let projects = client.projects(&PageQuery::default()).await.expect("200");
    assert_eq!(projects.items, vec![project]);
    let instance = client
        .create_instance(
            "all",
            &InstanceRequest {
                time_zone: Some("Europe/Berlin".into()),
                ..InstanceRequest::id("i")
            },
        )
        .await
        .expect("201");
    assert_eq!(instance.time_zone.as_deref(), Some("Europe/Berlin"));
    let listed = client
        .instances("all", &PageQuery::default())
        .await
        .expect("200");
    assert_eq!(listed.items.len(), 1);
    let renamed = client
        .update_instance(
            "all",
            "i",
            &InstanceUpdate {
                name: Some("renamed".into()),
                time_zone: Some(None),
                ..InstanceUpdate::default()
            },
        )
        .await
        .expect("200");
    assert_eq!(
        (renamed.name.as_str(), renamed.time_zone),
        ("renamed", None)
    );

    let registration = |item: &str| {
        Entry::new(
            "itemRegistration",
            json!({"itemId": item, "productId": "ga",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 40}}),
        )
    };
    let summary = client
        .submit_entries(
            "all",
            "i",
            &EntrySubmission::new([
                Entry::new(
                    "productRegistration",
                    json!({"productId": "ga", "capacity": 10}),
                ),
                registration("a"),
                registration("b"),
                Entry::new(
                    "itemSale",
                    json!({"itemId": "a", "quantity": 1, "price": 40}),
                )
                .with_transaction("sale-1"),
                Entry::new(
                    "itemSale",
                    json!({"itemId": "ghost", "quantity": 1, "price": 40}),
                )
                .with_transaction("bad-1"),
            ]),
        )
        .await
        .expect("200");
    assert_eq!((summary.received, summary.accepted), (5, 5));
    let log = client
        .entries("all", "i", &LogQuery::default())
        .await
        .expect("200");
    assert_eq!(log.items.len(), 5);
    poll(
        "the entries applied",
        || client.instance("all", "i"),
        |d| d.processing.applied_sequence == 5,
    )
    .await;

    let items = client
        .items("all", "i", Some("ga"), &PageQuery::default())
        .await
        .expect("200");
    assert_eq!(items.items.len(), 2);
    let a = client.item("all", "i", "a").await.expect("200");
    assert_eq!((a.product_id.as_str(), a.sold), ("ga", 1));
    let products = client
        .products("all", "i", &PageQuery::default())
        .await
        .expect("200");
    assert_eq!(products.items[0].sold, 1);
    let ga = client.product("all", "i", "ga").await.expect("200");
    assert_eq!(ga.items, ["a", "b"]);

    let m = client
        .create_price_match(
            "all",
            "i",
            &PriceMatchRequest {
                item_id: "b".into(),
                source_item_id: "a".into(),
                ratio: Some(1.5),
                ..PriceMatchRequest::default()
            },
        )
        .await
        .expect("201");
    assert_eq!(
        client.price_matches("all", "i").await.expect("200").items,
        vec![m.clone()]
    );
    client
        .delete_price_match("all", "i", &m.match_id)
        .await
        .expect("204");
    assert!(
        client
            .price_matches("all", "i")
            .await
            .expect("200")
            .items
            .is_empty()
    );

    let rejections = EventQuery {
        event_type: Some(EventType::EntriesRejected),
        ..EventQuery::default()
    };
    let events = poll(
        "the rejection event",
        || client.events("all", "i", &rejections),
        |p| !p.items.is_empty(),
    )
    .await;
    assert_eq!(events.items[0].event_type, EventType::EntriesRejected);
    assert_eq!(events.items[0].data["errors"][0]["transactionId"], "bad-1");

    // For an event this instance never emits: the rejection event above is listed once it
    // is stored, but handed to the subscriptions (dispatched) after that, in the background;
    // a subscription to it could still get a delivery, and the empty log below would race.
    let sub = client
        .create_subscription(
            "all",
            &SubscriptionRequest {
                callback_url: "http://127.0.0.1:9/hook".into(),
                events: Some(vec![EventType::InstanceDeactivated]),
                ..SubscriptionRequest::default()
            },
        )
        .await
        .expect("201");
    let id = sub.subscription.subscription_id;
    assert!(
        client
            .deliveries("all", &id, &PageQuery::default())
            .await
            .expect("200")
            .items
            .is_empty()
    );
    client.delete_subscription("all", &id).await.expect("204");
    assert!(
        client
            .subscriptions("all")
            .await
            .expect("200")
            .items
            .is_empty()
    );

    // Problems: typed, with their field errors.
    let missing = client.project("nope").await.expect_err("404");
    assert_eq!(missing.problem().map(|p| p.status), Some(404), "{missing}");
    let invalid = client
        .create_price_match(
            "all",
            "i",
            &PriceMatchRequest {
                item_id: "a".into(),
                source_item_id: "a".into(),
                ..PriceMatchRequest::default()
            },
        )
        .await
        .expect_err("400");
    let problem = invalid.problem().expect("a problem");
    assert_eq!(problem.status, 400, "{problem:?}");
    assert_eq!(problem.errors[0].code, "range", "{problem:?}");
}

/// The Prometheus text as `name{labels}` -> value.
fn scraped(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Issue 13, item 1: `/metrics` on its own listener, behind the configured token, counts
/// what a real flow did: entries accepted, a duplicate, a rejection by its code, entries
/// applied, a requested calculation with its changed price and duration, a delivered
/// webhook with its attempt's duration; the gauges read at the scrape (no lag, no delivery
/// pending, a fresh signing key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_real_flow() {
    use pricing_client::types::{EventType, SubscriptionRequest};
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(
        &data,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-token",
            "scrape-secret",
        ],
    );
    let metrics_url = service
        .stdout_lines
        .iter()
        .find_map(|l| l.strip_prefix("metrics on "))
        .expect("the metrics address is printed")
        .to_owned();
    assert!(
        metrics_url.starts_with("http://127.0.0.1:"),
        "{metrics_url}"
    );
    let http = reqwest::Client::new();
    let scrape = || async {
        let response = http
            .get(&metrics_url)
            .bearer_auth("scrape-secret")
            .send()
            .await
            .expect("scrape");
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap_or_default()
                .starts_with("text/plain; version=0.0.4")
        );
        response.text().await.expect("text")
    };
    // Without the token, or with another one: 401, as problem+json.
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic c2NyYXBlLXNlY3JldA=="),
    ] {
        let mut request = http.get(&metrics_url);
        if let Some(a) = auth {
            request = request.header("authorization", a);
        }
        let response = request.send().await.expect("scrape");
        assert_eq!(response.status(), 401, "{auth:?}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
    }
    // The token in the first of two Authorization headers: 401 too (no header is picked).
    let response = http
        .get(&metrics_url)
        .header("authorization", "Bearer scrape-secret")
        .header("authorization", "Bearer wrong")
        .send()
        .await
        .expect("scrape");
    assert_eq!(response.status(), 401);
    // The API's listener does not serve them.
    let on_api = http
        .get(format!("{}/metrics", service.base))
        .bearer_auth("scrape-secret")
        .send()
        .await
        .expect("GET");
    assert_ne!(on_api.status(), 200);

    // A receiver for prices.updated.
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    let receiver = axum::Router::new().fallback(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { axum::http::StatusCode::NO_CONTENT }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hook = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    let token = token(&data, "metrics");
    let client = api(&service.base, &token);
    client
        .create_project(&ProjectRequest::id("shop"))
        .await
        .expect("201");
    client
        .create_instance("shop", &InstanceRequest::id("gig"))
        .await
        .expect("201");
    client
        .create_subscription(
            "shop",
            &SubscriptionRequest {
                callback_url: hook,
                events: Some(vec![EventType::PricesUpdated]),
                description: None,
            },
        )
        .await
        .expect("201");
    let sale = |tx: &str, item: &str| {
        Entry::new(
            "itemSale",
            json!({"itemId": item, "quantity": 1, "price": 20}),
        )
        .with_transaction(tx)
    };
    client
        .submit_entries(
            "shop",
            "gig",
            &EntrySubmission::new([
                Entry::new(
                    "productRegistration",
                    json!({"productId": "ga", "capacity": 100}),
                ),
                Entry::new(
                    "itemRegistration",
                    json!({"itemId": "a", "productId": "ga",
                    "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
                    "priceSettings": {"min": 10, "max": 100, "default": 40}}),
                ),
                sale("s-1", "a"),
                sale("s-2", "a"),
                // Valid syntax, but no such item: rejected when applied.
                sale("bad-1", "nope"),
            ]),
        )
        .await
        .expect("200");
    let again = client
        .submit_entries("shop", "gig", &EntrySubmission::new([sale("s-1", "a")]))
        .await
        .expect("200");
    assert_eq!(again.duplicates, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = client
            .instance("shop", "gig")
            .await
            .expect("details")
            .processing;
        if p.applied_sequence == p.last_sequence {
            break;
        }
        assert!(Instant::now() < deadline, "not applied: {p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .calculate_prices(
            "shop",
            &CalculationRequest {
                instance_ids: Some(vec!["gig".into()]),
                metadata: None,
            },
        )
        .await
        .expect("202");

    let deadline = Instant::now() + Duration::from_secs(30);
    let values = loop {
        let values = scraped(&scrape().await);
        if values.get("pricing_webhook_deliveries_total{outcome=\"succeeded\"}") == Some(&1.0) {
            break values;
        }
        assert!(
            Instant::now() < deadline,
            "no delivery counted: {values:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let value = |key: &str| {
        *values
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing: {values:#?}"))
    };
    assert_eq!(value("pricing_entries_accepted_total"), 5.0);
    assert_eq!(value("pricing_entries_duplicated_total"), 1.0);
    assert_eq!(
        value("pricing_entries_rejected_total{code=\"unknownItem\"}"),
        1.0
    );
    assert_eq!(value("pricing_entries_applied_total"), 4.0);
    assert!(value("pricing_apply_latency_seconds_count") >= 1.0);
    assert_eq!(value("pricing_processing_lag_entries"), 0.0);
    assert_eq!(
        value("pricing_calculations_total{trigger=\"request\"}"),
        1.0
    );
    assert_eq!(
        value("pricing_prices_changed_total{trigger=\"request\"}"),
        1.0
    );
    assert_eq!(
        value("pricing_calculation_duration_seconds_count{trigger=\"request\"}"),
        1.0
    );
    assert_eq!(
        value("pricing_calculation_duration_seconds_bucket{trigger=\"request\",le=\"+Inf\"}"),
        1.0
    );
    assert_eq!(
        value("pricing_webhook_deliveries_total{outcome=\"succeeded\"}"),
        1.0
    );
    assert_eq!(
        value("pricing_webhook_deliveries_total{outcome=\"retrying\"}"),
        0.0
    );
    assert_eq!(
        value("pricing_calculations_total{trigger=\"schedule\"}"),
        0.0
    );
    assert_eq!(value("pricing_webhook_attempt_duration_seconds_count"), 1.0);
    assert_eq!(value("pricing_webhook_oldest_pending_seconds"), 0.0);
    let key_age = value("pricing_signing_key_age_seconds");
    assert!((0.0..3600.0).contains(&key_age), "{key_age}");
}
