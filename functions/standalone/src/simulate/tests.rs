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
}
