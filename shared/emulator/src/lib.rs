//! Test support for the AWS adapters: an AWS API emulator (moto server from PyPI) and the
//! stack's data resources provisioned on it from `template.yaml` by `infra/emulator.py`.
//!
//! `infra/test.sh` starts one emulator for the whole run and exports its address as
//! `PRICING_EMULATOR_ENDPOINT`. A test binary run on its own (plain `cargo test`) starts its
//! own emulator on a free loopback port; a watchdog stops it when the test process exits.

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Set by `infra/test.sh` to share one emulator between test binaries.
pub const ENDPOINT_VAR: &str = "PRICING_EMULATOR_ENDPOINT";

/// The workspace root (where template.yaml and infra/ are).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The emulator's base URL, starting one if none runs for this process.
pub fn endpoint() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| match std::env::var(ENDPOINT_VAR) {
        Ok(e) if !e.is_empty() => e,
        _ => start(),
    })
}

/// An emulator of this process's own, never the shared one (the chaos runs put a fault
/// proxy in front of it and fill it with their own load), started on first use.
pub fn own_endpoint() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(start)
}

fn run(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn start() -> String {
    let root = workspace_root();
    run(
        Command::new(root.join("infra/venv.sh")).current_dir(&root),
        "infra/venv.sh (installs moto into .venv)",
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port");
    // moto with a lean TransactWriteItems rollback (tests/support/moto_lean.py, the same
    // emulator as the test command's). The watchdog ends it when this test process is gone.
    let script = format!(
        "'{}' '{}' {port} >/dev/null 2>&1 & m=$!; \
         while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill $m",
        root.join(".venv/bin/python").display(),
        root.join("tests/support/moto_lean.py").display(),
        parent = std::process::id()
    );
    let watchdog = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    // Kept for the life of the process; the watchdog ends itself (and moto) after it.
    static WATCHDOG: OnceLock<std::sync::Mutex<std::process::Child>> = OnceLock::new();
    let _ = WATCHDOG.set(std::sync::Mutex::new(watchdog));
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto_server did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    format!("http://127.0.0.1:{port}")
}

/// A name prefix unique to this process and call, so tests never share resources.
pub fn unique_prefix(name: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{name}-{}-{n}-{nanos:x}", std::process::id())
}

/// Creates the template's tables, queues and secrets under a fresh prefix and returns the
/// function environment (TABLE_NAME, PROCESS_QUEUE_URL, ...) pointing at them.
pub fn provision(name: &str) -> HashMap<String, String> {
    provision_on(endpoint(), name)
}

/// [`provision`] on the emulator at `endpoint`.
pub fn provision_on(endpoint: &str, name: &str) -> HashMap<String, String> {
    let root = workspace_root();
    let out = run(
        Command::new(root.join(".venv/bin/python"))
            .arg(root.join("infra/emulator.py"))
            .args([
                "provision",
                "--endpoint",
                endpoint,
                "--prefix",
                &unique_prefix(name),
            ]),
        "infra/emulator.py provision",
    );
    serde_json::from_slice(&out.stdout).expect("provision prints a JSON object")
}
