//! The OpenAPI document (shared/api/openapi.json, served at /openapi.json) against the
//! code: the routes, the time zones the service accepts, problem+json and `Api-Version`
//! on every response. Schemathesis checks the behaviour against it (infra/apifuzz.sh).

use std::collections::BTreeSet;

use pricing_api::ROUTES;
use pricing_api::system::OPENAPI;
use serde_json::Value;

/// Routes the standalone binary adds to the router (functions/standalone/src/oauth.rs).
const STANDALONE_ROUTES: &[(&str, &str)] = &[("POST", "/oauth2/token")];

fn doc() -> Value {
    serde_json::from_str(OPENAPI).expect("the document is JSON")
}

/// Every (method, path, operation) of the document.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            out.push((method.to_uppercase(), path.clone(), op.clone()));
        }
    }
    out
}

/// Follows a local `$ref` (`#/components/...`).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{r} does not resolve")),
        None => v,
    }
}

#[test]
fn the_document_lists_exactly_the_routes() {
    let doc = doc();
    let documented: BTreeSet<(String, String)> = operations(&doc)
        .into_iter()
        .map(|(m, p, _)| (m, p))
        .collect();
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .chain(STANDALONE_ROUTES)
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, routed);
}

#[test]
fn every_operation_takes_the_api_version_and_may_refuse_it() {
    let doc = doc();
    let pattern = doc["components"]["parameters"]["ApiVersion"]["schema"]["pattern"]
        .as_str()
        .expect("a pattern");
    assert_eq!(
        pattern, r"^\+?0*3(?:\.\+?0*[01](?:\.\+?0*[0-9]{1,9})?)?$",
        "the pattern states what pricing_api::version_supported accepts"
    );
    for ok in [
        "3",
        "3.1",
        "3.1.0",
        "3.0.2",
        "03.01",
        "+3.1",
        "3.1.999999999",
    ] {
        assert!(pricing_api::version_supported(ok), "{ok}");
    }
    for bad in [
        "2",
        "3.2",
        "4.0",
        "3.1.0.0",
        "",
        "v3",
        "3.-1",
        "3.1.99999999999",
    ] {
        assert!(!pricing_api::version_supported(bad), "{bad}");
    }
    for (method, path, op) in operations(&doc) {
        let takes = op["parameters"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["$ref"] == "#/components/parameters/ApiVersion")
        });
        assert!(takes, "{method} {path}");
        assert!(op["responses"].get("400").is_some(), "{method} {path}");
    }
}

#[test]
fn every_operation_declares_its_path_parameters_and_an_id() {
    let doc = doc();
    let mut ids = BTreeSet::new();
    for (method, path, op) in operations(&doc) {
        let declared: BTreeSet<String> = op["parameters"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().expect("name").to_owned())
            .collect();
        let in_path: BTreeSet<String> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .map(str::to_owned)
            .collect();
        assert_eq!(declared, in_path, "{method} {path}");
        let id = op["operationId"].as_str().expect("operationId");
        assert!(ids.insert(id.to_owned()), "{id} twice");
    }
}

#[test]
fn every_response_carries_the_api_version_and_every_error_is_a_problem() {
    let doc = doc();
    for (method, path, op) in operations(&doc) {
        let responses = op["responses"].as_object().expect("responses");
        // A success, or the 410 of a removed endpoint.
        assert!(
            responses.keys().any(|s| s.starts_with('2') || s == "410"),
            "{method} {path}"
        );
        for (status, response) in responses {
            let response = resolve(&doc, response);
            let version = resolve(&doc, &response["headers"]["Api-Version"]);
            assert_eq!(version["required"], true, "{method} {path} {status}");
            assert_eq!(
                version["schema"]["const"],
                pricing_core::API_VERSION,
                "{method} {path} {status}"
            );
            if status.starts_with('4') || status.starts_with('5') {
                let content = response["content"].as_object().expect("content");
                let types: Vec<&str> = content.keys().map(String::as_str).collect();
                // RFC 6749 prescribes its own error shape for the token endpoint; its
                // version check answers a problem like every route.
                let expected: &[&str] = match (path.as_str(), status.as_str()) {
                    ("/oauth2/token", "400") => &["application/json", "application/problem+json"],
                    ("/oauth2/token", _) => &["application/json"],
                    _ => &["application/problem+json"],
                };
                assert_eq!(types, expected, "{method} {path} {status}");
            }
        }
    }
}

#[test]
fn the_time_zones_are_exactly_those_the_service_accepts() {
    let doc = doc();
    let documented: BTreeSet<String> = doc["components"]["schemas"]["TimeZone"]["enum"]
        .as_array()
        .expect("TimeZone is an enum")
        .iter()
        .map(|v| v.as_str().expect("a name").to_owned())
        .collect();
    let accepted: BTreeSet<String> = jiff::tz::db()
        .available()
        .map(|name| name.to_string())
        .filter(|name| pricing_api::util::is_iana_name(name))
        .collect();
    let missing: Vec<_> = accepted.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "accepted but not documented: {missing:?}; documented but refused: {extra:?}"
    );
    for refused in ["europe/berlin", "Mars/Olympus", "+01:00"] {
        assert!(!documented.contains(refused));
    }
}

#[test]
fn every_entry_kind_has_its_own_data_schema() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let mapping = schemas["Entry"]["discriminator"]["mapping"]
        .as_object()
        .expect("a discriminated union");
    let kinds: BTreeSet<&str> = mapping.keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [
        "productRegistration",
        "itemRegistration",
        "itemRemoval",
        "instanceMetadata",
        "itemMetadata",
        "itemProperties",
        "productMetadata",
        "productProperties",
        "itemSale",
        "itemQuantity",
        "itemReservation",
        "pricingSchedule",
        "instanceActions",
    ]
    .into();
    assert_eq!(kinds, expected);
    for (kind, target) in mapping {
        let target = target.as_str().expect("a reference");
        let schema = doc
            .pointer(target.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{target} does not resolve"));
        assert_eq!(schema["properties"]["type"]["const"], kind.as_str());
        assert!(schema["properties"]["data"].is_object(), "{kind}");
        assert_ne!(
            schema["properties"]["data"],
            serde_json::json!({"type": "object"}),
            "{kind}: data is typed"
        );
    }
}

/// The document and the entry parser agree on every kind: each kind's schema carries an
/// example (infra/apifuzz.sh checks it against the schema), the parser accepts it as that
/// kind, and refuses the same entry with an empty `data` (every kind requires something
/// there, as its schema says).
#[test]
fn the_entry_parser_accepts_each_kinds_example_and_refuses_it_emptied() {
    use pricing_core::entry::{ParseOptions, parse_entry};
    use pricing_core::validate::Errors;
    let doc = doc();
    let mapping = doc["components"]["schemas"]["Entry"]["discriminator"]["mapping"]
        .as_object()
        .expect("a discriminated union");
    for (kind, target) in mapping {
        let target = target.as_str().expect("a reference");
        let schema = doc
            .pointer(target.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{target} does not resolve"));
        let example = &schema["example"];
        assert_eq!(
            example["type"],
            kind.as_str(),
            "{kind}: an example of the kind"
        );
        let mut errors = Errors::default();
        let entry = parse_entry(example, "", ParseOptions::default(), &mut errors);
        assert!(errors.is_empty(), "{kind}: {:?}", errors.list);
        let entry = entry.unwrap_or_else(|| panic!("{kind}: parsed"));
        assert_eq!(entry.kind.type_name(), kind.as_str());

        let mut emptied = example.clone();
        emptied["data"] = serde_json::json!({});
        let mut errors = Errors::default();
        let entry = parse_entry(&emptied, "", ParseOptions::default(), &mut errors);
        assert!(
            entry.is_none() && !errors.is_empty(),
            "{kind}: empty data accepted"
        );
        assert!(
            errors.list.iter().all(|e| e.pointer.starts_with("/data")),
            "{kind}: {:?}",
            errors.list
        );
    }
}
