//! The standalone under storage faults (issue 15, item 3): a full disk during appends and
//! commits answers 503 with Retry-After, writes nothing half, and the service recovers by
//! itself once space returns.
//!
//! The data directory is on a small tmpfs mounted for the test; mounting needs root
//! (CAP_SYS_ADMIN). Without it the test says so on stderr and passes without checking:
//! run it as root (`sudo -E cargo test -p standalone --test chaos_storage`) to check.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Service, token};

/// A tmpfs of `size` at `path`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(path).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(path.to_owned()))
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success(), "remount");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: Value,
) -> (u16, Option<String>, Value) {
    let r = client
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, r.json().await.unwrap_or(Value::Null))
}

fn batch(n: usize) -> Value {
    let entries: Vec<Value> = (0..20)
        .map(|k| {
            json!({"type": "itemSale", "transactionId": format!("b{n}-{k}"),
                   "data": {"itemId": "ghost", "price": 40, "metadata": {"pad": "y".repeat(2000)}}})
        })
        .collect();
    json!({ "entries": entries })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_503_with_retry_after_and_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&dir.path().join("disk"), "3m") else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the full-disk test did not run"
        );
        return;
    };
    let data = disk.0.join("data");
    let service = Service::start(&data);
    let token = token(&data, "disk");
    let client = reqwest::Client::new();
    let base = service.base.clone();
    for (path, body) in [
        ("/projects".to_owned(), json!({"projectId": "p"})),
        (
            "/projects/p/instances".to_owned(),
            json!({"instanceId": "i"}),
        ),
    ] {
        let (s, _, b) = post(&client, &format!("{base}{path}"), &token, body).await;
        assert_eq!(s, 201, "{b}");
    }
    let url = format!("{base}/projects/p/instances/i/entries");
    // Fill the disk: 20 entries of ~2 KB per batch.
    let mut accepted = 0;
    let mut full = None;
    for n in 0..400 {
        let (s, retry_after, b) = post(&client, &url, &token, batch(n)).await;
        match s {
            200 => {
                assert_eq!(b["accepted"], 20, "{b}");
                accepted += 20;
            }
            503 => {
                assert_eq!(retry_after.as_deref(), Some("1"), "503 with Retry-After");
                full = Some(n);
                break;
            }
            other => panic!("a full disk answered {other}: {b}"),
        }
    }
    let full = full.expect("the disk filled up");
    assert!(accepted > 0);

    // Space returns: the refused batch is taken whole (nothing of it was written before),
    // and processing catches up by itself.
    disk.resize("64m");
    let (s, _, b) = post(&client, &url, &token, batch(full)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (b["accepted"].as_u64(), b["duplicates"].as_u64()),
        (Some(20), Some(0)),
        "{b}"
    );
    accepted += 20;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let details: Value = client
            .get(format!("{base}/projects/p/instances/i"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let p = &details["processing"];
        if p["lastSequence"] == accepted && p["appliedSequence"] == accepted {
            break;
        }
        assert_eq!(
            p["lastSequence"], accepted,
            "gapless, nothing half-written: {p}"
        );
        assert!(
            Instant::now() < deadline,
            "processing did not catch up: {p}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(service);
}

/// `standalone serve` on `data` is expected to stop at once with an error; its stderr.
fn start_fails(data: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "the service refused to start");
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the service started on {}", data.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `pricing.db` that is not SQLite, or another program's SQLite database: refused with
/// an error naming the file, and the file is left byte for byte as it was.
#[test]
fn a_corrupted_or_foreign_database_is_refused_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    let bytes: Vec<u8> = (0..16_384u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(garbage.join("pricing.db"), &bytes).unwrap();
    let err = start_fails(&garbage);
    let db = garbage.join("pricing.db");
    assert!(err.contains(&db.display().to_string()), "{err}");
    assert!(err.contains("not a database"), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "left as it was");

    // Another program's SQLite file (made by the sqlite3 module of Python, if any).
    let foreign = dir.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    let db = foreign.join("pricing.db");
    let made = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
             c.execute('create table customers(id integer primary key, name text)'); \
             c.execute(\"insert into customers(name) values ('x')\"); c.commit()",
        ])
        .arg(&db)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "python3 makes a foreign SQLite file");
    let before = std::fs::read(&db).unwrap();
    let err = start_fails(&foreign);
    assert!(err.contains(&db.display().to_string()), "{err}");
    assert!(
        err.contains("not a pricing database") && err.contains("customers"),
        "{err}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before, "left as it was");
    assert!(
        !foreign.join("pricing.db-wal").exists(),
        "not even switched to WAL"
    );
}

/// A database of ours whose signing keys are gone stops the start, naming both files and
/// the deliberate way on; `rotate-keys` does not make a new set either, unless asked to
/// with `--new-key-set`, after which the service starts.
#[test]
fn a_database_without_its_signing_keys_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    drop(pricing_embedded::EmbeddedStore::open(&data.join("pricing.db")).unwrap());
    let err = start_fails(&data);
    assert!(err.contains("signing-keys.json is missing"), "{err}");
    assert!(err.contains("rotate-keys --new-key-set"), "{err}");
    let rotate = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_standalone"))
            .arg("rotate-keys")
            .args(extra)
            .arg("--data")
            .arg(&data)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let refused = rotate(&[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--new-key-set"),
        "{refused:?}"
    );
    assert!(!data.join("signing-keys.json").exists(), "no set made");
    assert!(rotate(&["--new-key-set"]).status.success());
    assert!(data.join("signing-keys.json").exists());
    let mut started = Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let exited = started.try_wait().unwrap();
    let _ = started.kill();
    let _ = started.wait();
    assert_eq!(exited, None, "it starts with the new set");
}

/// A read-only data directory (a tmpfs remounted read-only; root only, like the full disk):
/// a clear error naming the path, at start.
#[test]
fn a_read_only_data_directory_is_a_clear_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&dir.path().join("ro"), "8m") else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the read-only test did not run"
        );
        return;
    };
    let data = disk.0.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let status = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&disk.0)
        .status()
        .unwrap();
    assert!(status.success());
    let err = start_fails(&data);
    assert!(err.contains(&data.display().to_string()), "{err}");
    assert!(err.to_lowercase().contains("read-only"), "{err}");
}
