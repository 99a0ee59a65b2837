//! `standalone simulate market` as a user runs it: the `--json` document has exactly the
//! keys of PRICING.md, the same seed gives the same output, scenario errors name the field,
//! the flag form reports the same references, overrides apply.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

mod common;

fn standalone(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_standalone"))
        .args(args)
        .output()
        .unwrap()
}

fn write(dir: &Path, name: &str, v: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

fn small() -> Value {
    json!({
        "name": "small", "days": 3, "slotsPerDay": 8, "capacity": 20, "expectedSales": 0.8,
        "items": [
            {"itemId": "ga", "priceSettings": {"min": 10, "max": 90, "default": 40},
             "arrivals": 50, "shape": [[0, 1], [0.7, 1], [1, 4]],
             "willingnessToPay": {"type": "exponential", "mean": 35}},
            {"itemId": "vip", "priceSettings": {"min": 40, "max": 200, "default": 90},
             "arrivals": 10, "shape": [[0, 1], [1, 1]],
             "willingnessToPay": {"type": "uniform", "low": 50, "high": 150}}
        ],
        "pastInstances": 1, "runs": 12, "seed": 3
    })
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

fn set<'a>(k: &[&'a str]) -> BTreeSet<&'a str> {
    k.iter().copied().collect()
}

#[test]
fn the_json_report_has_exactly_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.json", &small());
    let out = standalone(&[
        "simulate",
        "market",
        "--scenario",
        &file,
        "--json",
        "--models",
        "default,pace,fixed",
        "--model",
        r#"steep={"type":"pace","sensitivity":1}"#,
    ]);
    // No progress bar when stderr is not a terminal.
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(
        keys(&v),
        set(&[
            "scenario",
            "runs",
            "optimal",
            "fluidBound",
            "bestFixed",
            "models"
        ])
    );
    assert_eq!(v["scenario"], "small");
    assert_eq!(v["runs"], 12);
    assert_eq!(keys(&v["optimal"]), set(&["revenue"]));
    assert_eq!(keys(&v["bestFixed"]), set(&["prices", "revenue"]));
    assert_eq!(keys(&v["bestFixed"]["prices"]), set(&["ga", "vip"]));
    let labels: Vec<&str> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(
                keys(m),
                set(&["label", "revenue", "sold", "percentOfOptimal"])
            );
            assert_eq!(keys(&m["revenue"]), set(&["mean", "ci95"]));
            assert_eq!(keys(&m["sold"]), set(&["mean"]));
            assert!(m["sold"]["mean"].as_f64().unwrap() <= 20.0);
            m["label"].as_str().unwrap()
        })
        .collect();
    assert_eq!(labels, ["default", "pace", "fixed", "steep"]);
    let optimal = v["optimal"]["revenue"].as_f64().unwrap();
    assert!(optimal <= v["fluidBound"].as_f64().unwrap());
    assert!(optimal >= v["bestFixed"]["revenue"].as_f64().unwrap());
}

#[test]
fn the_same_seed_gives_the_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.json", &small());
    let run = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "market",
            "--scenario",
            &file,
            "--models",
            "pace,fixed",
        ];
        args.extend_from_slice(extra);
        let out = standalone(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run(&["--json"]);
    assert_eq!(first, run(&["--json"]));
    assert_ne!(first, run(&["--json", "--seed", "4"]));
    // The overrides: runs and past instances.
    let v: Value =
        serde_json::from_str(&run(&["--json", "--runs", "5", "--past-instances", "0"])).unwrap();
    assert_eq!(v["runs"], 5);
    // The readable table.
    let table = run(&[]);
    assert!(
        table.starts_with("scenario small: 3 days, 8 slots a day, capacity 20, 2 items"),
        "{table}"
    );
    assert!(
        table.contains("1 past instance before the scored one"),
        "{table}"
    );
    assert!(table.contains("optimal dynamic policy") && table.contains("best fixed (ga "));
}

#[test]
fn scenario_errors_name_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = small();
    bad["items"][1]["willingnessToPay"] = json!({"type": "exponential", "mean": -2});
    let file = write(dir.path(), "bad.json", &bad);
    let out = standalone(&["simulate", "market", "--scenario", &file]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.json: items/1/willingnessToPay/mean: must be > 0"),
        "{err}"
    );
    let mut unknown = small();
    unknown["item"] = json!([]);
    let file = write(dir.path(), "unknown.json", &unknown);
    let err =
        String::from_utf8_lossy(&standalone(&["simulate", "market", "--scenario", &file]).stderr)
            .into_owned();
    assert!(err.contains("unknown.json: item: unknown field"), "{err}");
    // A member named twice: which did the author mean? Refused, named with its line.
    let text = small().to_string().replacen('{', r#"{"capacity": 5, "#, 1);
    let file = dir.path().join("twice.json");
    std::fs::write(&file, text).unwrap();
    let out = standalone(&["simulate", "market", "--scenario", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"twice.json: an object names the member "capacity" twice at line 1"#),
        "{err}"
    );
    let out = standalone(&["simulate", "market", "--scenario", "/no/such/file.json"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file.json"));
    // Every field within its bound, but years of work in all: refused at once, naming the
    // factors (it ran on silently).
    // The error of a scenario `simulate market --models fixed` refuses.
    let refused = |name: &str, scenario: &Value| {
        let file = write(dir.path(), name, scenario);
        let out = standalone(&[
            "simulate",
            "market",
            "--scenario",
            &file,
            "--models",
            "fixed",
        ]);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let mut huge = small();
    huge["runs"] = json!(1_000_000);
    huge["pastInstances"] = json!(20);
    let err = refused("huge.json", &huge);
    assert!(
        err.contains("is over the cap of 1000000000: lower runs, pastInstances"),
        "{err}"
    );
    // The buyers count: a million an instance over 100,000 runs of one slot was taken
    // (an outside probe: a million runs of it, some 8 hours).
    let mut crowd = small();
    crowd["days"] = json!(1);
    crowd["slotsPerDay"] = json!(1);
    crowd["runs"] = json!(100_000);
    crowd["items"][0]["arrivals"] = json!(1_000_000);
    let err = refused("crowd.json", &crowd);
    assert!(
        err.contains("+ 1000010 / 10) = ") && err.contains("is over the cap of 1000000000"),
        "{err}"
    );
}

#[test]
fn the_flag_form_reports_the_same_references() {
    let out = standalone(&[
        "simulate",
        "market",
        "--days",
        "4",
        "--steps-per-day",
        "6",
        "--capacity",
        "30",
        "--base-demand",
        "10",
        "--runs",
        "6",
        "--models",
        "fixed",
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["scenario"], "flags");
    assert_eq!(keys(&v["bestFixed"]["prices"]), set(&["simulated-item"]));
    let optimal = v["optimal"]["revenue"].as_f64().unwrap();
    assert!(optimal > 0.0 && optimal <= v["fluidBound"].as_f64().unwrap());
    // Fixed at the default price (50) sells no more than capacity, at 50 each.
    let fixed = &v["models"][0];
    let (revenue, sold) = (
        fixed["revenue"]["mean"].as_f64().unwrap(),
        fixed["sold"]["mean"].as_f64().unwrap(),
    );
    assert!(
        sold <= 30.0 && (revenue - 50.0 * sold).abs() < 0.01,
        "{fixed}"
    );
}

/// The API's `POST /simulations` (the console's simulation page) answers exactly what
/// `simulate market --scenario FILE --models ... --json` prints for the same document.
#[tokio::test]
async fn post_simulations_answers_what_the_cli_prints() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut scenario = small();
    scenario["pastInstances"] = json!(0);
    let file = write(dir.path(), "s.json", &scenario);
    let cli = json_of(&standalone(&[
        "simulate",
        "market",
        "--scenario",
        &file,
        "--models",
        "pace,fixed,revenue",
        "--json",
    ]));
    let token = common::token(&data, "sim");
    let (mut server, base) = common::serve(&data).await;
    let response = reqwest::Client::new()
        .post(format!("{base}/simulations?models=pace,fixed,revenue"))
        .bearer_auth(&token)
        .json(&scenario)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let api: Value = response.json().await.unwrap();
    assert_eq!(api, cli);
    server.kill().await.unwrap();
}
