//! The CLI's parts of `simulate`: models by flag, the flag form's market (the market, the
//! references and the report are tested in pricing-simulate).

use pricing_core::entry::PricingModel;

use super::scenario::Wtp;
use super::*;

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

#[test]
fn models_parse_by_name_and_as_custom_json() {
    let m = parse_models(
        &[
            "default".into(),
            "pace".into(),
            "TIMEBASED".into(),
            "tiers".into(),
            "fixed".into(),
        ],
        &[r#"gentle={"type":"pace","sensitivity":0.2}"#.into()],
        false,
    )
    .unwrap();
    let labels: Vec<&str> = m.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        ["default", "pace", "TIMEBASED", "tiers", "fixed", "gentle"]
    );
    // `default` is what the parser gives a product without pricingModel.
    let unset = pricing_core::entry::product_props_from_doc(
        &serde_json::Map::new(),
        "",
        &mut pricing_core::validate::Errors::default(),
    )
    .unwrap();
    assert_eq!(m[0].model.as_ref(), Some(&unset.pricing_model));
    assert!(matches!(m[2].model, Some(PricingModel::TimeBased { .. })));
    assert!(
        matches!(m[5].model, Some(PricingModel::Pace { sensitivity, .. }) if sensitivity == 0.2)
    );
    let err = |names: &[&str], custom: &[&str], current| {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let custom: Vec<String> = custom.iter().map(|s| s.to_string()).collect();
        parse_models(&names, &custom, current)
            .unwrap_err()
            .to_string()
    };
    assert!(err(&["surge"], &[], false).contains("unknown model `surge`"));
    assert!(err(&["current"], &[], false).contains("needs a log"));
    assert!(err(&["fixed", "fixed"], &[], false).contains("listed twice"));
    assert!(
        err(&[], &[r#"x={"type":"tiers","tiers":[]}"#], false)
            .contains("tiers needs at least one entry")
    );
    assert!(err(&[], &["nolabel"], false).contains("LABEL=JSON"));
    assert!(err(&[], &[], false).contains("no models"));
    assert_eq!(
        parse_models(&["current".into()], &[], true).unwrap()[0].model,
        None
    );
}

#[test]
fn the_flag_form_builds_a_scenario_with_the_old_demand_at_the_default_price() {
    use clap::Parser;
    let parse = |extra: &[&str]| {
        let mut argv = vec!["standalone", "simulate", "market"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::cli::Command::Simulate(crate::cli::SimulateArgs {
                source: crate::cli::SimulateSource::Market(m),
                ..
            })) => Ok(m),
            Ok(_) => panic!("not simulate market"),
            Err(e) => Err(e.to_string()),
        }
    };
    let args = parse(&[
        "--elasticity",
        "-2",
        "--days",
        "10",
        "--past-instances",
        "2",
        "--runs",
        "7",
    ])
    .unwrap();
    let s = market_scenario(&args).unwrap();
    assert_eq!(
        (s.slots, s.capacity, s.runs, s.past_instances),
        (240, 1000, 7, 2)
    );
    let item = &s.items[0];
    assert_eq!(item.wtp, Wtp::Exponential { mean: 25.0 });
    // 40 a day at the default, times the mean time factor 1.25, over 10 days.
    assert!(rel(item.arrivals * item.wtp.buy_probability(50.0), 500.0) < 1e-12);
    assert!(
        market_scenario(&parse(&["--elasticity", "1"]).unwrap())
            .unwrap_err()
            .to_string()
            .contains("--elasticity")
    );
    assert!(
        parse(&["--scenario", "x.json", "--days", "3"])
            .unwrap_err()
            .contains("cannot be used with")
    );
    // An elasticity in exponent form is a value, not a flag (clap's negative-number test
    // took -1.5 but not -1e-3).
    let s = market_scenario(&parse(&["--elasticity", "-1e-3"]).unwrap()).unwrap();
    assert_eq!(s.items[0].wtp, Wtp::Exponential { mean: 50_000.0 });
    // The flags have a file's bounds.
    for (flags, says) in [
        (&["--days", "1000000"][..], "--days must be at most 100000"),
        (
            &["--days", "2", "--steps-per-day", "1441"][..],
            "--steps-per-day must be at most 1440",
        ),
    ] {
        let e = market_scenario(&parse(flags).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{flags:?}: {e}");
    }
}

#[test]
fn a_scenario_file_s_encoding_and_numbers_are_named_where_they_fail() {
    let dir = std::env::temp_dir().join(format!("scenario-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = serde_json::json!({
        "name": "t", "days": 2, "capacity": 10, "expectedSales": 1,
        "items": [{"itemId": "a", "priceSettings": {"min": 1, "max": 100, "default": 50},
                   "arrivals": 20, "shape": [[0, 1], [1, 1]],
                   "willingnessToPay": {"type": "exponential", "mean": 40}}],
    })
    .to_string();
    let read = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        read_scenario(&path).map_err(|e| e.to_string())
    };
    // A byte order mark is ignored.
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(good.as_bytes());
    assert!(read("bom.json", &bom).is_ok());
    // A byte that is not UTF-8: its place.
    let latin1 = good
        .replace("\"t\"", "\"caf\u{e9}\"")
        .replace('\u{e9}', "\u{1}");
    let mut bytes = latin1.into_bytes();
    let at = bytes.iter().position(|b| *b == 1).unwrap();
    bytes[at] = 0xE9;
    let e = read("latin1.json", &bytes).unwrap_err();
    let place = format!("not UTF-8: byte 0xe9 at line 1 column {}", at + 1);
    assert!(e.contains(&place), "{e}");
    // A number out of range: the text around it shows the field.
    let e = read(
        "huge.json",
        good.replace("\"arrivals\":20", "\"arrivals\":1e400")
            .as_bytes(),
    )
    .unwrap_err();
    assert!(
        e.contains("number out of range")
            && e.contains("near `")
            && e.contains("\"arrivals\":1e400"),
        "{e}"
    );
    // A default price of 0 earns nothing under every model: refused as --default-price 0.
    let e = read(
        "free.json",
        good.replace("\"default\":50", "\"default\":0")
            .replace("\"min\":1", "\"min\":0")
            .as_bytes(),
    )
    .unwrap_err();
    assert!(
        e.contains("items/0/priceSettings/default") && e.contains("more than 0"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
