//! A fault-injecting HTTP proxy for the AWS SDK clients of the chaos tests (issue 15).
//!
//! It listens on loopback and forwards every request to the AWS emulator (moto); the SDK
//! clients are pointed at it through `endpoint_url`. Given a seed and a rate, it answers a
//! share of the calls with a fault instead of (or after) the emulator's answer:
//!
//! | fault | answer | when |
//! |---|---|---|
//! | `Throttle` | 400 `ProvisionedThroughputExceededException` / `ThrottlingException` (DynamoDB), `ThrottlingException` (SQS, Secrets Manager) | before only: a throttled request is not applied |
//! | `TxConflict` | 400 `TransactionCanceledException` with `TransactionConflict` reasons (TransactWriteItems), `TransactionConflictException` (PutItem, UpdateItem, DeleteItem) | before only: nothing is written |
//! | `Status500`, `Status503` | `InternalServerError` / `ServiceUnavailable` | before or after |
//! | `Reset` | the connection is reset (RST, no answer) | before or after |
//! | `Delay` | no answer until after the SDK's attempt timeout, then the connection is closed | before or after |
//!
//! "After" means the emulator has applied the request and its answer is thrown away: the
//! "did it commit?" case.
//!
//! Reproducible from the seed: whether a call is faulted, with what and when depends only
//! on the seed, the call (its `X-Amz-Target` and body) and how many times the same call
//! was seen before (an SDK retry of a request is the same call, seen once more). The
//! decisions do not depend on how concurrent callers interleave; given the same calls,
//! the same seed injects the same faults.
//!
//! Emulator fidelity, kept here because the chaos runs need it:
//! - Requests are forwarded one at a time per service (DynamoDB, SQS, other), to
//!   completion even when the client has gone: moto does not isolate concurrent requests
//!   (see `pricing_aws::emulator`), and AWS applies a request it received whatever the
//!   client does afterwards.
//! - TransactWriteItems honours `ClientRequestToken` as DynamoDB does (moto ignores it): a
//!   repeated token of an applied transaction is answered with the first answer and
//!   applies nothing.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// What a faulted call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    Throttle,
    TxConflict,
    Status500,
    Status503,
    Reset,
    Delay,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::Throttle,
        Fault::TxConflict,
        Fault::Status500,
        Fault::Status503,
        Fault::Reset,
        Fault::Delay,
    ];

    /// Whether the fault may come after the emulator applied the call (AWS never
    /// throttles or cancels a request it applied).
    pub fn may_come_after(self) -> bool {
        matches!(
            self,
            Fault::Status500 | Fault::Status503 | Fault::Reset | Fault::Delay
        )
    }
}

/// Before the emulator sees the call, or after it applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum When {
    Before,
    After,
}

/// The proxy's settings.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    pub seed: u64,
    /// Share of calls faulted, 0.0 ..= 1.0.
    pub rate: f64,
    /// Of the faults that may come after, the share that does.
    pub after_share: f64,
    /// How long a `Delay` holds the answer back (longer than the SDK's attempt timeout).
    pub delay: Duration,
    /// The faults drawn from (each equally likely among those that fit the call).
    pub faults: Vec<Fault>,
}

impl FaultConfig {
    pub fn new(seed: u64, rate: f64) -> Self {
        FaultConfig {
            seed,
            rate,
            after_share: 0.5,
            delay: Duration::from_secs(3),
            faults: Fault::ALL.to_vec(),
        }
    }
}

/// A decision for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub fault: Fault,
    pub when: When,
}

/// Which service a call is for, from its `X-Amz-Target` (`DynamoDB_20120810.PutItem`,
/// `AmazonSQS.ReceiveMessage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    DynamoDb,
    Sqs,
    SecretsManager,
    Other,
}

pub fn service_of(target: &str) -> Service {
    if target.starts_with("DynamoDB") {
        Service::DynamoDb
    } else if target.starts_with("AmazonSQS") {
        Service::Sqs
    } else if target.starts_with("secretsmanager") {
        Service::SecretsManager
    } else {
        Service::Other
    }
}

/// The faults that make sense for an operation: conflicts only on DynamoDB writes.
pub fn applicable(target: &str, fault: Fault) -> bool {
    let op = target.rsplit('.').next().unwrap_or("");
    match fault {
        Fault::TxConflict => matches!(
            op,
            "TransactWriteItems" | "PutItem" | "UpdateItem" | "DeleteItem"
        ),
        Fault::Throttle => service_of(target) != Service::Other,
        _ => service_of(target) != Service::Other,
    }
}

/// splitmix64: a small, good, seedable generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The decision procedure, apart from the network (unit-tested on its own).
#[derive(Debug)]
pub struct Decider {
    config: Mutex<FaultConfig>,
    seen: Mutex<HashMap<u64, u64>>,
}

impl Decider {
    pub fn new(config: FaultConfig) -> Self {
        Decider {
            config: Mutex::new(config),
            seen: Mutex::new(HashMap::new()),
        }
    }

    pub fn set_rate(&self, rate: f64) {
        self.config.lock().unwrap_or_else(|e| e.into_inner()).rate = rate;
    }

    pub fn config(&self) -> FaultConfig {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The decision for this call (the n-th time this exact call is seen).
    pub fn decide(&self, target: &str, body: &[u8]) -> Option<Decision> {
        let config = self.config();
        let call = fnv1a(&[target.as_bytes(), body]);
        let n = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let n = seen.entry(call).or_insert(0);
            *n += 1;
            *n
        };
        let mut rng = Rng::new(config.seed ^ call ^ n.wrapping_mul(0xA24B_AED4_963E_E407));
        // Always draw the same number of values, so a rate change does not shift the rest.
        let (u, pick, w) = (rng.unit(), rng.next_u64(), rng.unit());
        if u >= config.rate {
            return None;
        }
        let fitting: Vec<Fault> = config
            .faults
            .iter()
            .copied()
            .filter(|f| applicable(target, *f))
            .collect();
        if fitting.is_empty() {
            return None;
        }
        let fault = fitting[(pick % fitting.len() as u64) as usize];
        let when = if fault.may_come_after() && w < config.after_share {
            When::After
        } else {
            When::Before
        };
        Some(Decision { fault, when })
    }
}

/// Counts of what the proxy did.
#[derive(Debug, Default)]
pub struct Stats {
    pub calls: AtomicU64,
    pub forwarded: AtomicU64,
    pub replayed_tokens: AtomicU64,
    faults: Mutex<HashMap<(Fault, When), u64>>,
    per_op: Mutex<HashMap<String, u64>>,
}

impl Stats {
    fn count(&self, d: Decision) {
        *self
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((d.fault, d.when))
            .or_insert(0) += 1;
    }

    pub fn faults(&self) -> Vec<((Fault, When), u64)> {
        let mut v: Vec<_> = self
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        v.sort();
        v
    }

    pub fn total_faults(&self) -> u64 {
        self.faults().iter().map(|(_, n)| n).sum()
    }

    pub fn per_op(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .per_op
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        v.sort();
        v
    }
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    decider: Decider,
    stats: Stats,
    gates: [Semaphore; 3],
    /// ClientRequestToken of applied TransactWriteItems -> (status, body).
    tokens: Mutex<HashMap<String, (u16, Vec<u8>)>>,
}

/// The proxy; it runs until the runtime it was started on ends.
#[derive(Clone)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Starts the proxy on a free loopback port in front of `upstream`
    /// (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str, config: FaultConfig) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(8)
                .build()
                .expect("http client"),
            decider: Decider::new(config),
            stats: Stats::default(),
            gates: [
                Semaphore::const_new(1),
                Semaphore::const_new(1),
                Semaphore::const_new(1),
            ],
            tokens: Mutex::new(HashMap::new()),
        });
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = serve(s, socket).await;
                });
            }
        });
        FaultProxy { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_rate(&self, rate: f64) {
        self.shared.decider.set_rate(rate);
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    pub fn config(&self) -> FaultConfig {
        self.shared.decider.config()
    }
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one HTTP/1.1 request (Content-Length or chunked body); `None` at a clean end.
async fn read_request(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Request>> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("GET").to_owned();
    let path = parts.next().unwrap_or("/").to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut request = Request {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if chunked {
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                fill(socket, buf).await?;
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| std::io::Error::other("bad chunk size"))?;
            buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers end with an empty line.
                loop {
                    if let Some(i) = find(buf, b"\r\n") {
                        let empty = i == 0;
                        buf.drain(..i + 2);
                        if empty {
                            break;
                        }
                    } else {
                        fill(socket, buf).await?;
                    }
                }
                break;
            }
            while buf.len() < size + 2 {
                fill(socket, buf).await?;
            }
            request.body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    } else {
        let len: usize = request
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < len {
            fill(socket, buf).await?;
        }
        request.body = buf.drain(..len).collect();
    }
    Ok(Some(request))
}

async fn fill(socket: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    let n = socket.read(&mut chunk).await?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed mid-request",
        ));
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

struct Response {
    status: u16,
    content_type: String,
    extra: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn write_response(socket: &mut TcpStream, r: &Response) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for (k, v) in &r.extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&r.body);
    socket.write_all(&bytes).await?;
    socket.flush().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn serve(shared: Arc<Shared>, mut socket: TcpStream) -> std::io::Result<()> {
    let _ = socket.set_nodelay(true);
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut socket, &mut buf).await? {
        let target = request.header("x-amz-target").unwrap_or("").to_owned();
        shared.stats.calls.fetch_add(1, Ordering::Relaxed);
        *shared
            .stats
            .per_op
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(if target.is_empty() {
                format!("{} {}", request.method, request.path)
            } else {
                target.clone()
            })
            .or_insert(0) += 1;
        let decision = if target.is_empty() {
            None
        } else {
            shared.decider.decide(&target, &request.body)
        };
        if let Some(d) = decision {
            shared.stats.count(d);
        }
        if let Some(
            d @ Decision {
                when: When::Before, ..
            },
        ) = decision
        {
            match d.fault {
                Fault::Reset => return reset(socket),
                Fault::Delay => {
                    tokio::time::sleep(shared.decider.config().delay).await;
                    return Ok(());
                }
                other => {
                    write_response(&mut socket, &fault_response(other, &target, &request.body))
                        .await?;
                    continue;
                }
            }
        }
        let response = forward(&shared, &target, &request).await;
        match decision {
            Some(Decision {
                fault: Fault::Reset,
                ..
            }) => return reset(socket),
            Some(Decision {
                fault: Fault::Delay,
                ..
            }) => {
                tokio::time::sleep(shared.decider.config().delay).await;
                return Ok(());
            }
            Some(d) => {
                write_response(
                    &mut socket,
                    &fault_response(d.fault, &target, &request.body),
                )
                .await?
            }
            None => write_response(&mut socket, &response).await?,
        }
    }
    Ok(())
}

/// Closes the connection with a reset (no FIN, no answer).
// SO_LINGER 0: the drop sends the RST at once, it does not block (the warning is about
// a non-zero linger).
#[allow(deprecated)]
fn reset(socket: TcpStream) -> std::io::Result<()> {
    socket.set_linger(Some(Duration::ZERO))?;
    drop(socket);
    Ok(())
}

/// Forwards to the emulator, one call per service at a time, to completion.
async fn forward(shared: &Shared, target: &str, request: &Request) -> Response {
    let token = (target == "DynamoDB_20120810.TransactWriteItems")
        .then(|| client_request_token(&request.body))
        .flatten();
    let gate = match service_of(target) {
        Service::DynamoDb => &shared.gates[0],
        Service::Sqs => &shared.gates[1],
        Service::SecretsManager | Service::Other => &shared.gates[2],
    };
    let _permit = gate.acquire().await.ok();
    if let Some(t) = &token
        && let Some((status, body)) = shared
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(t)
            .cloned()
    {
        shared.stats.replayed_tokens.fetch_add(1, Ordering::Relaxed);
        return Response {
            status,
            content_type: "application/x-amz-json-1.0".into(),
            extra: Vec::new(),
            body,
        };
    }
    shared.stats.forwarded.fetch_add(1, Ordering::Relaxed);
    let method =
        reqwest::Method::from_bytes(request.method.as_bytes()).unwrap_or(reqwest::Method::POST);
    let mut req = shared
        .http
        .request(method, format!("{}{}", shared.upstream, request.path))
        .body(request.body.clone());
    for (k, v) in &request.headers {
        if matches!(
            k.to_ascii_lowercase().as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding" | "expect"
        ) {
            continue;
        }
        req = req.header(k, v);
    }
    let response = match req.send().await {
        Ok(r) => r,
        Err(e) => return internal(&format!("proxy: upstream failed: {e}")),
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/x-amz-json-1.0")
        .to_owned();
    let extra: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-amz") || k.as_str().starts_with("x-amzn"))
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let body = match response.bytes().await {
        Ok(b) => b.to_vec(),
        Err(e) => return internal(&format!("proxy: upstream body failed: {e}")),
    };
    if let Some(t) = token
        && status == 200
    {
        shared
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(t, (status, body.clone()));
    }
    Response {
        status,
        content_type,
        extra,
        body,
    }
}

fn client_request_token(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("ClientRequestToken")?.as_str().map(str::to_owned)
}

fn internal(message: &str) -> Response {
    Response {
        status: 500,
        content_type: "application/x-amz-json-1.0".into(),
        extra: Vec::new(),
        body: serde_json::json!({"__type": "InternalFailure", "message": message})
            .to_string()
            .into_bytes(),
    }
}

/// The answer a fault gives, in the service's JSON protocol.
pub fn fault_response_parts(fault: Fault, target: &str, body: &[u8]) -> (u16, serde_json::Value) {
    use serde_json::json;
    let dynamo = service_of(target) == Service::DynamoDb;
    let op = target.rsplit('.').next().unwrap_or("");
    let ddb = |name: &str| format!("com.amazonaws.dynamodb.v20120810#{name}");
    match fault {
        Fault::Throttle if dynamo => {
            // Half and half, decided by the call itself (reproducible).
            let name = if fnv1a(&[body]).is_multiple_of(2) {
                "ProvisionedThroughputExceededException"
            } else {
                "ThrottlingException"
            };
            (
                400,
                json!({"__type": ddb(name), "message": "injected: rate of requests exceeds the allowed throughput"}),
            )
        }
        Fault::Throttle if service_of(target) == Service::SecretsManager => (
            400,
            json!({"__type": "ThrottlingException", "message": "injected: Rate exceeded"}),
        ),
        Fault::Throttle => (
            400,
            json!({"__type": "com.amazonaws.sqs#ThrottlingException", "message": "injected: Rate exceeded"}),
        ),
        Fault::TxConflict if op == "TransactWriteItems" => {
            let actions = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("TransactItems")?.as_array().map(Vec::len))
                .unwrap_or(1)
                .max(1);
            // The first action conflicts, the others are fine.
            let reasons: Vec<serde_json::Value> = (0..actions)
                .map(|i| {
                    if i == 0 {
                        json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"})
                    } else {
                        json!({"Code": "None"})
                    }
                })
                .collect();
            let codes: Vec<&str> = (0..actions)
                .map(|i| {
                    if i == 0 {
                        "TransactionConflict"
                    } else {
                        "None"
                    }
                })
                .collect();
            (
                400,
                json!({
                    "__type": ddb("TransactionCanceledException"),
                    "Message": format!("Transaction cancelled, please refer cancellation reasons for specific reasons [{}]", codes.join(", ")),
                    "CancellationReasons": reasons,
                }),
            )
        }
        Fault::TxConflict => (
            400,
            json!({"__type": ddb("TransactionConflictException"),
                   "message": "injected: Operation was rejected because there is an ongoing transaction for the item."}),
        ),
        Fault::Status503 if dynamo => (
            503,
            json!({"__type": ddb("ServiceUnavailable"), "message": "injected: service unavailable"}),
        ),
        Fault::Status503 => (
            503,
            json!({"__type": "com.amazonaws.sqs#ServiceUnavailable", "message": "injected: service unavailable"}),
        ),
        _ if dynamo => (
            500,
            json!({"__type": ddb("InternalServerError"), "message": "injected: internal server error"}),
        ),
        _ => (
            500,
            json!({"__type": "com.amazonaws.sqs#InternalError", "message": "injected: internal error"}),
        ),
    }
}

fn fault_response(fault: Fault, target: &str, body: &[u8]) -> Response {
    let (status, json) = fault_response_parts(fault, target, body);
    Response {
        status,
        content_type: "application/x-amz-json-1.0".into(),
        extra: Vec::new(),
        body: json.to_string().into_bytes(),
    }
}
