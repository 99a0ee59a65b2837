//! The harness of the end-to-end tests on the standalone binary: start it on a data
//! directory, get tokens, call the API, poll until something holds.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Service {
    child: Child,
    pub base: String,
    pub stdout_lines: Vec<String>,
}

impl Service {
    pub fn start(data: &Path) -> Service {
        Self::start_with(data, &[])
    }

    pub fn start_with(data: &Path, extra: &[&str]) -> Service {
        let mut child = Command::new(env!("CARGO_BIN_EXE_standalone"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start standalone");
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let base = loop {
            assert!(
                Instant::now() < deadline,
                "the service did not print its address"
            );
            let mut line = String::new();
            if reader.read_line(&mut line).expect("read stdout") == 0 {
                panic!("the service exited early: {lines:?}");
            }
            let line = line.trim().to_owned();
            lines.push(line.clone());
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.to_owned();
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in reader.lines() {});
        Service {
            child,
            base,
            stdout_lines: lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// Peak resident memory of the process so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM")
            * 1024
    }

    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "no graceful exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn token(data: &Path, tenant: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args(["token", "--tenant", tenant, "--data"])
        .arg(data)
        .output()
        .expect("token subcommand");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .last()
        .expect("a token line")
        .to_owned()
}

pub async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> reqwest::Result<(u16, Value)> {
    let mut req = client.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// Polls `url` until `done` accepts its JSON body.
pub async fn wait_for(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = send(client, reqwest::Method::GET, url.to_owned(), token, None)
            .await
            .expect("GET");
        if status == 200 && done(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
