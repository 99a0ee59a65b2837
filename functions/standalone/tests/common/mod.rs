//! The standalone binary as the integration tests start it.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use tokio::io::{AsyncBufReadExt, BufReader};

/// A token of `tenant` from `standalone token` on the data directory `data`.
pub fn token(data: &Path, tenant: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args(["token", "--tenant", tenant, "--data"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_owned()
}

/// `standalone serve` on a free loopback port over `data`, without `/metrics`: the process
/// (killed on drop) and its base URL, once it says it listens.
pub async fn serve(data: &Path) -> (tokio::process::Child, String) {
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--data",
        ])
        .arg(data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the service printed its address");
        if let Some(at) = line.find("listening on ") {
            break line[at + "listening on ".len()..].trim().to_owned();
        }
    };
    // The rest of its output is read (and dropped), so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (server, base)
}
