//! template.yaml and the workspace agree: every Lambda function crate has its function
//! resource (built by cargo-lambda, with a log group and a retention), and every function
//! resource names a crate of the workspace.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Package names of functions/* except the standalone process.
fn function_crates() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in std::fs::read_dir(root().join("functions")).expect("functions/") {
        let manifest = dir.expect("entry").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let name = text
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("name = ")
                    .map(|n| n.trim_matches('"').to_owned())
            })
            .expect("a package name");
        if name != "standalone" {
            names.insert(name);
        }
    }
    names
}

/// (logical id, binary) of every function resource, read from the template text.
fn template_functions(template: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut resource = String::new();
    for line in template.lines() {
        if line.starts_with("  ") && !line.starts_with("   ") && line.trim_end().ends_with(':') {
            resource = line.trim().trim_end_matches(':').to_owned();
        }
        if let Some(binary) = line.trim().strip_prefix("Binary: ") {
            out.push((resource.clone(), binary.trim().to_owned()));
        }
    }
    out
}

#[test]
fn every_function_crate_has_its_resource_and_back() {
    let template = std::fs::read_to_string(root().join("template.yaml")).expect("template.yaml");
    let functions = template_functions(&template);
    let binaries: BTreeSet<String> = functions.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(
        binaries.len(),
        functions.len(),
        "a binary is deployed twice: {functions:?}"
    );
    assert_eq!(
        binaries,
        function_crates(),
        "template.yaml and functions/ disagree"
    );
    assert_eq!(
        template.matches("BuildMethod: rust-cargolambda").count(),
        functions.len(),
        "every function is built by cargo-lambda"
    );
    for (logical_id, _) in &functions {
        let log_group = format!("/aws/lambda/${{{logical_id}}}");
        assert!(
            template.contains(&log_group),
            "{logical_id} has no log group with a retention"
        );
    }
    // Every log group (the functions', the API's access log) keeps LogRetentionDays.
    let log_groups = of_type(&resources(&template), "AWS::Logs::LogGroup").len();
    assert!(log_groups >= functions.len());
    assert_eq!(
        template
            .matches("RetentionInDays: !Ref LogRetentionDays")
            .count(),
        log_groups,
        "a log group without the retention"
    );
}

/// The lines of each top-level resource of template.yaml, by logical id.
fn resources(template: &str) -> Vec<(String, Vec<String>)> {
    section(template, "Resources")
}

/// The lines of each entry of a top-level section of template.yaml (`Resources`,
/// `Parameters`), by name.
fn section(template: &str, name: &str) -> Vec<(String, Vec<String>)> {
    let header = format!("{name}:");
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    for line in template.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            inside = line.trim_end() == header;
            continue;
        }
        if !inside || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with("  ") && !line.starts_with("   ") && line.trim_end().ends_with(':') {
            out.push((line.trim().trim_end_matches(':').to_owned(), Vec::new()));
        } else if let Some((_, lines)) = out.last_mut() {
            lines.push(line.to_owned());
        }
    }
    out
}

/// The items of a flow list (`[a, b]`) or a single value.
fn values(text: &str) -> Vec<String> {
    let text = text.trim();
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

/// One IAM statement of a function's inline policies: its actions and resources.
#[derive(Debug, Default)]
struct Statement {
    actions: Vec<String>,
    resources: Vec<String>,
}

/// The statements of a resource's `Policies` (flow-style Action and Resource, as the
/// template writes them; anything else fails the test rather than going unchecked).
fn statements(lines: &[String]) -> Vec<Statement> {
    let mut out: Vec<Statement> = Vec::new();
    for line in lines {
        let t = line.trim();
        if t.starts_with("- Effect:") {
            assert_eq!(t, "- Effect: Allow", "only Allow statements are expected");
            out.push(Statement::default());
        } else if let Some(rest) = t.strip_prefix("Action:") {
            assert!(
                !rest.trim().is_empty(),
                "write Action in flow style: {line}"
            );
            out.last_mut()
                .expect("an Action inside a statement")
                .actions = values(rest);
        } else if let Some(rest) = t.strip_prefix("Resource:") {
            assert!(
                !rest.trim().is_empty(),
                "write Resource in flow style: {line}"
            );
            out.last_mut()
                .expect("a Resource inside a statement")
                .resources = values(rest);
        }
    }
    out
}

/// Issue 9, item 8: only the key-rotator may write the key secrets; the functions that sign
/// read the signing keys; the management and simulations APIs read only the public keys;
/// no other function touches either secret.
#[test]
fn only_the_key_rotator_writes_the_key_secrets() {
    use std::collections::BTreeMap;

    let template = std::fs::read_to_string(root().join("template.yaml")).expect("template.yaml");
    let resources = resources(&template);
    let functions: Vec<&(String, Vec<String>)> = resources
        .iter()
        .filter(|(_, lines)| {
            lines
                .iter()
                .any(|l| l.trim() == "Type: AWS::Serverless::Function")
        })
        .collect();
    assert_eq!(functions.len(), function_crates().len());

    let secrets = ["SigningKeysSecret", "SigningPublicKeysSecret"];
    let mut writers = BTreeSet::new();
    let mut readers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (id, lines) in &functions {
        assert!(
            !lines.iter().any(|l| l.contains("SecretsManager")),
            "{id}: a managed or template policy for Secrets Manager; write statements"
        );
        for s in statements(lines) {
            let on_secrets: Vec<&str> = secrets
                .iter()
                .copied()
                .filter(|secret| {
                    s.resources
                        .iter()
                        .any(|r| r == &format!("!Ref {secret}") || r.contains(secret))
                })
                .collect();
            let wildcard = s
                .resources
                .iter()
                .any(|r| r == "\"*\"" || r == "'*'" || r == "*");
            for action in &s.actions {
                let secrets_action = action.starts_with("secretsmanager:") || action == "\"*\"";
                if !secrets_action {
                    continue;
                }
                assert!(!wildcard, "{id}: {action} on every resource");
                assert!(
                    !on_secrets.is_empty(),
                    "{id}: {action} on {:?}",
                    s.resources
                );
                match action.as_str() {
                    "secretsmanager:GetSecretValue" => {
                        for secret in &on_secrets {
                            readers.entry(secret).or_default().insert(id.clone());
                        }
                    }
                    "secretsmanager:PutSecretValue" | "secretsmanager:UpdateSecret" => {
                        writers.insert(id.clone());
                    }
                    other => panic!("{id}: unexpected {other} on the key secrets"),
                }
            }
        }
    }
    let set = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(
        writers,
        set(&["KeyRotatorFunction"]),
        "who writes the secrets"
    );
    assert_eq!(
        readers["SigningKeysSecret"],
        set(&[
            "EntriesApiFunction",
            "KeyRotatorFunction",
            "WebhookDeliveryFunction"
        ]),
        "who reads the private keys"
    );
    assert_eq!(
        readers["SigningPublicKeysSecret"],
        set(&[
            "KeyRotatorFunction",
            "ManagementApiFunction",
            "SimulationsApiFunction"
        ]),
        "who reads the public keys"
    );

    // The bootstrap: the key-rotator stores the first key during the deployment, before
    // the functions that read the keys exist.
    let bootstrap = &resources
        .iter()
        .find(|(id, _)| id == "SigningKeyBootstrap")
        .expect("a SigningKeyBootstrap resource")
        .1;
    assert!(
        bootstrap
            .iter()
            .any(|l| l.trim() == "ServiceToken: !GetAtt KeyRotatorFunction.Arn"),
        "the bootstrap invokes the key-rotator"
    );
    for reader in [
        "EntriesApiFunction",
        "ManagementApiFunction",
        "SimulationsApiFunction",
        "WebhookDeliveryFunction",
    ] {
        let lines = &resources
            .iter()
            .find(|(id, _)| id == reader)
            .expect(reader)
            .1;
        assert!(
            lines
                .iter()
                .any(|l| l.trim() == "DependsOn: SigningKeyBootstrap"),
            "{reader} is created after the first key is stored"
        );
    }
    for var in [
        "SIGNING_KEYS_SECRET_ID: !Ref SigningKeysSecret",
        "SIGNING_PUBLIC_KEYS_SECRET_ID: !Ref SigningPublicKeysSecret",
    ] {
        assert!(template.contains(var), "Globals set {var}");
    }
}

// ------------------------------------------------------------------ alarms and dashboard
// Issue 13, items 2 and 3: the alarms cover every queue, dead-letter queue and function,
// each notifies the optional topic and has its runbook section; the dashboard names only
// resources that exist.

fn template() -> String {
    std::fs::read_to_string(root().join("template.yaml")).expect("template.yaml")
}

/// Resources of one type, by logical id.
fn of_type<'a>(
    resources: &'a [(String, Vec<String>)],
    kind: &str,
) -> Vec<&'a (String, Vec<String>)> {
    let line = format!("Type: {kind}");
    resources
        .iter()
        .filter(|(_, lines)| lines.iter().any(|l| l.trim() == line))
        .collect()
}

/// What an alarm watches, read from its properties.
#[derive(Debug)]
struct Alarm {
    id: String,
    /// Every `MetricName` (one, or several for metric math).
    metrics: Vec<String>,
    /// Every dimension value, as written (`!Ref X`, `!GetAtt X.QueueName`).
    dimensions: Vec<String>,
    threshold: String,
    comparison: String,
    missing: String,
    lines: Vec<String>,
}

fn property(lines: &[String], key: &str) -> Vec<String> {
    let prefix = format!("{key}:");
    lines
        .iter()
        .filter_map(|l| l.trim().strip_prefix(&prefix).map(|v| v.trim().to_owned()))
        .collect()
}

fn alarms(resources: &[(String, Vec<String>)]) -> Vec<Alarm> {
    of_type(resources, "AWS::CloudWatch::Alarm")
        .into_iter()
        .map(|(id, lines)| {
            let one = |key: &str| {
                let v = property(lines, key);
                assert_eq!(v.len(), 1, "{id}: one {key}, got {v:?}");
                v[0].clone()
            };
            let mut dimensions = Vec::new();
            for line in lines {
                if let Some(rest) = line.trim().strip_prefix("Dimensions:") {
                    let value = rest
                        .split_once("Value:")
                        .map(|(_, v)| v.trim().trim_end_matches(']').trim_end_matches('}'))
                        .unwrap_or_else(|| panic!("{id}: write Dimensions in flow style: {line}"));
                    dimensions.push(value.trim().to_owned());
                }
            }
            Alarm {
                id: id.clone(),
                metrics: property(lines, "MetricName"),
                dimensions,
                threshold: one("Threshold"),
                comparison: one("ComparisonOperator"),
                missing: one("TreatMissingData"),
                lines: lines.clone(),
            }
        })
        .collect()
}

/// The alarms on `metric` whose dimensions include `dimension`.
fn watching<'a>(alarms: &'a [Alarm], metric: &str, dimension: &str) -> Vec<&'a Alarm> {
    alarms
        .iter()
        .filter(|a| {
            a.metrics.iter().any(|m| m == metric) && a.dimensions.iter().any(|d| d == dimension)
        })
        .collect()
}

/// Logical ids of the queues some redrive policy sends to.
fn dead_letter_queues(template: &str) -> BTreeSet<String> {
    template
        .lines()
        .filter_map(|l| l.trim().strip_prefix("deadLetterTargetArn: !GetAtt "))
        .map(|v| v.trim().trim_end_matches(".Arn").to_owned())
        .collect()
}

#[test]
fn every_queue_and_dead_letter_queue_has_its_alarms() {
    let template = template();
    let resources = resources(&template);
    let alarms = alarms(&resources);
    let queues: BTreeSet<String> = of_type(&resources, "AWS::SQS::Queue")
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    let dlqs = dead_letter_queues(&template);
    assert_eq!(
        dlqs.len(),
        3,
        "process, recalc and webhook dead-letter queues: {dlqs:?}"
    );
    assert!(dlqs.is_subset(&queues));
    for dlq in &dlqs {
        let any_message = watching(
            &alarms,
            "ApproximateNumberOfMessagesVisible",
            &format!("!GetAtt {dlq}.QueueName"),
        );
        assert!(
            any_message
                .iter()
                .any(|a| a.threshold == "0" && a.comparison == "GreaterThanThreshold"),
            "{dlq}: no alarm on any message in it"
        );
    }
    for queue in &queues {
        assert!(
            !watching(
                &alarms,
                "ApproximateAgeOfOldestMessage",
                &format!("!GetAtt {queue}.QueueName")
            )
            .is_empty(),
            "{queue}: no alarm on the age of its oldest message"
        );
    }
    // The processing lag, twice: in seconds from the process queue's age (it still rises
    // when the entry processor does not run at all and so publishes nothing), and in
    // entries from the service's own gauge, in the namespace the functions write to.
    let lag = alarms
        .iter()
        .find(|a| a.id == "ProcessingLagAlarm")
        .expect("a ProcessingLagAlarm");
    assert_eq!(lag.dimensions, ["!GetAtt ProcessQueue.QueueName"]);
    let entries = alarms
        .iter()
        .find(|a| a.id == "ProcessingLagEntriesAlarm")
        .expect("a ProcessingLagEntriesAlarm");
    assert_eq!(entries.metrics, [pricing_api::metrics::PROCESSING_LAG]);
    assert!(
        entries.dimensions.is_empty(),
        "the EMF lines carry no dimension"
    );
    let namespace = property(&entries.lines, "Namespace");
    let lines: Vec<String> = template.lines().map(str::to_owned).collect();
    let functions_write = property(&lines, "METRICS_NAMESPACE");
    assert_eq!(
        namespace, functions_write,
        "the alarm reads the functions' namespace"
    );
    assert_eq!(entries.comparison, "GreaterThanThreshold");
    assert_eq!(entries.missing, "notBreaching");
}

/// The process and recalc queues give their idempotent messages 10 receives before the
/// dead-letter queue (docs/aws.md, "Process and recalc queues"); the webhook queue 10 (8
/// attempts and 2 of slack, docs/aws.md, "Webhook queue").
#[test]
fn each_queue_dead_letters_after_its_documented_receives() {
    let template = template();
    let resources = resources(&template);
    for (queue, receives) in [
        ("ProcessQueue", "10"),
        ("RecalcQueue", "10"),
        ("WebhookQueue", "10"),
    ] {
        let (_, lines) = resources
            .iter()
            .find(|(id, _)| id == queue)
            .unwrap_or_else(|| panic!("{queue} missing"));
        assert_eq!(
            property(lines, "maxReceiveCount"),
            vec![receives.to_owned()],
            "{queue}"
        );
    }
}

#[test]
fn every_function_has_error_and_throttle_alarms() {
    let template = template();
    let resources = resources(&template);
    let alarms = alarms(&resources);
    let functions = of_type(&resources, "AWS::Serverless::Function");
    assert_eq!(functions.len(), function_crates().len());
    for (function, _) in functions {
        for metric in ["Errors", "Throttles"] {
            let found = watching(&alarms, metric, &format!("!Ref {function}"));
            assert!(
                found.iter().any(|a| a.comparison == "GreaterThanThreshold"),
                "{function}: no {metric} alarm"
            );
        }
    }
    // The API's 5xx rate, over the requests of the stack's HTTP API.
    let api = watching(&alarms, "5xx", "!Ref HttpApi");
    assert_eq!(api.len(), 1, "one 5xx rate alarm");
    assert!(
        api[0].metrics.iter().any(|m| m == "Count"),
        "a rate: 5xx / Count"
    );
    // Scheduler runs missing: too few invocations, and no data is missing runs.
    let runs = watching(&alarms, "Invocations", "!Ref SchedulerFunction");
    assert!(
        runs.iter()
            .any(|a| a.comparison == "LessThanThreshold" && a.missing == "breaching"),
        "no alarm on missing scheduler runs: {runs:?}"
    );
    // Webhook failures: the dead-letter queue (above) and the delivery function's errors.
    assert!(!watching(&alarms, "Errors", "!Ref WebhookDeliveryFunction").is_empty());
}

#[test]
fn every_alarm_notifies_the_optional_topic_and_has_a_runbook_section() {
    let template = template();
    let resources = resources(&template);
    let alarms = alarms(&resources);
    assert!(alarms.len() >= 20, "{} alarms", alarms.len());
    assert!(template.contains("  AlarmTopicArn:\n    Type: String\n    Default: \"\"\n"));
    assert!(template.contains("  HasAlarmTopic: !Not [!Equals [!Ref AlarmTopicArn, \"\"]]\n"));
    let runbook =
        std::fs::read_to_string(root().join("docs/operations.md")).expect("docs/operations.md");
    for alarm in &alarms {
        let id = &alarm.id;
        for key in ["AlarmActions", "OKActions"] {
            assert_eq!(
                property(&alarm.lines, key),
                [r#"!If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref "AWS::NoValue"]"#],
                "{id}: {key} go to the topic when one is given"
            );
        }
        let description = property(&alarm.lines, "AlarmDescription");
        assert!(
            description.len() == 1
                && description[0].contains("Threshold")
                && description[0].contains(&format!("docs/operations.md, {id}.")),
            "{id}: its description states the threshold and names its runbook section"
        );
        assert!(
            runbook.contains(&format!("`{id}`")),
            "docs/operations.md has no section on {id}"
        );
    }
}

#[test]
fn the_dashboard_references_existing_resources() {
    let template = template();
    let resources = resources(&template);
    let ids: BTreeSet<&str> = resources.iter().map(|(id, _)| id.as_str()).collect();
    let dashboards = of_type(&resources, "AWS::CloudWatch::Dashboard");
    assert_eq!(dashboards.len(), 1, "one dashboard");
    let lines = &dashboards[0].1;
    let start = lines
        .iter()
        .position(|l| l.trim() == "DashboardBody: !Sub |")
        .expect("DashboardBody: !Sub |");
    let body: String = lines[start + 1..]
        .iter()
        .map(|l| format!("{}\n", l.trim()))
        .collect();

    // Every ${Name} or ${Name.Attribute} is a pseudo parameter or a resource of the stack.
    let mut referenced = BTreeSet::new();
    let mut json = String::new();
    let mut rest = body.as_str();
    while let Some(at) = rest.find("${") {
        json.push_str(&rest[..at]);
        let end = rest[at..].find('}').expect("a closed ${...}") + at;
        let name = &rest[at + 2..end];
        if !name.starts_with("AWS::") {
            let (resource, attribute) = name.split_once('.').unwrap_or((name, ""));
            assert!(
                ids.contains(resource),
                "the dashboard names {resource}, which does not exist"
            );
            assert!(
                ["", "Arn", "QueueName"].contains(&attribute),
                "unexpected attribute {name}"
            );
            referenced.insert(resource.to_owned());
        }
        json.push('x');
        rest = &rest[end + 1..];
    }
    json.push_str(rest);
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("the body is JSON");
    assert!(parsed["widgets"].as_array().is_some_and(|w| !w.is_empty()));

    // It shows every function, queue (dead-letter queues included), the API and every alarm.
    for kind in [
        "AWS::Serverless::Function",
        "AWS::SQS::Queue",
        "AWS::Serverless::HttpApi",
        "AWS::CloudWatch::Alarm",
    ] {
        for (id, _) in of_type(&resources, kind) {
            assert!(referenced.contains(id), "the dashboard does not show {id}");
        }
    }
}

/// Issue 13, item 1: the service's own metrics on the dashboard are the ones it records
/// (`pricing_api::metrics::METRICS`, the names on `/metrics` and in the EMF lines), in the
/// namespace the functions are given, and the dashboard shows each of them.
#[test]
fn the_dashboard_shows_the_metrics_the_service_records() {
    use pricing_api::metrics::METRICS;
    let template = template();
    assert!(
        template.contains("METRICS_NAMESPACE: !Sub \"Pricing/${AWS::StackName}\""),
        "the functions' EMF namespace is set"
    );
    let known: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
    let mut named = BTreeSet::new();
    let mut rest = template.as_str();
    while let Some(at) = rest.find("pricing_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        if name.ends_with("_total") || name.ends_with("_seconds") || name.ends_with("_entries") {
            assert!(known.contains(name.as_str()), "{name} is not recorded");
            named.insert(name);
        }
    }
    for m in METRICS {
        assert!(
            named.contains(m.name),
            "the dashboard does not show {}",
            m.name
        );
    }
}

// ------------------------------------------------------------------ routes
// Issue 12, item 6: each API function links only its part of the API (bootstrap size).
// The gateway must send every route to the function that serves it, behind the same JWT
// authorizer as before: clients see one API.

/// One `HttpApi` event of a function: (function, method, path, public).
#[derive(Debug, Clone)]
struct GatewayRoute {
    function: String,
    method: String,
    path: String,
    /// `Auth: Authorizer: NONE` (no token checked by the gateway).
    public: bool,
}

fn gateway_routes(resources: &[(String, Vec<String>)]) -> Vec<GatewayRoute> {
    let mut out = Vec::new();
    for (function, lines) in of_type(resources, "AWS::Serverless::Function") {
        let mut current: Option<GatewayRoute> = None;
        for line in lines {
            let t = line.trim();
            if t == "Type: HttpApi" {
                out.extend(current.take());
                current = Some(GatewayRoute {
                    function: function.clone(),
                    method: String::new(),
                    path: String::new(),
                    public: false,
                });
            } else if t.starts_with("Type: ") {
                out.extend(current.take());
            } else if let Some(route) = current.as_mut() {
                if let Some(m) = t.strip_prefix("Method: ") {
                    route.method = m.to_owned();
                } else if let Some(p) = t.strip_prefix("Path: ") {
                    route.path = p.to_owned();
                } else if t == "Authorizer: NONE" {
                    route.public = true;
                }
            }
        }
        out.extend(current);
    }
    for r in &out {
        assert!(
            !r.method.is_empty() && r.path.starts_with('/'),
            "an HttpApi event without Method or Path: {r:?}"
        );
    }
    out
}

/// The route API Gateway (HTTP API) picks for `method path`: a full match of literal
/// segments before path variables, any of them before a greedy `{proxy+}`, an exact method
/// before ANY.
fn gateway_route<'a>(
    routes: &'a [GatewayRoute],
    method: &str,
    path: &str,
) -> Option<&'a GatewayRoute> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    routes
        .iter()
        .filter(|r| r.method == method || r.method == "ANY")
        .filter_map(|r| {
            let pattern: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
            let greedy = pattern.last().is_some_and(|p| p.ends_with("+}"));
            let fixed = if greedy {
                &pattern[..pattern.len() - 1]
            } else {
                &pattern[..]
            };
            let fits = if greedy {
                segments.len() > fixed.len()
            } else {
                segments.len() == fixed.len()
            };
            let matches = fits
                && fixed
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p.starts_with('{') || p == s);
            let literals = fixed.iter().filter(|p| !p.starts_with('{')).count();
            matches.then_some(((!greedy, literals, r.method == method), r))
        })
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, r)| r)
}

/// The status, `Allow` header and problem type of `router`'s answer to `method path`.
async fn answer(router: &axum::Router, method: &str, path: &str) -> (u16, String, String) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let allow = response
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let kind = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| Some(format!("{} {}", v.get("type")?, v.get("detail")?)))
        .unwrap_or_default();
    (status, allow, kind)
}

/// Whether `router` has a route for `method path`: anything but its fallback's 404 or a
/// 405. The requests carry no authorizer context, so a matched route that needs a token
/// answers 401 before any handler work.
async fn serves(router: &axum::Router, method: &str, path: &str) -> bool {
    let (status, _, kind) = answer(router, method, path).await;
    !(status == 405 || (status == 404 && kind.contains("no such resource; see /openapi.json")))
}

#[tokio::test]
async fn every_route_goes_to_the_function_that_serves_it() {
    use std::sync::Arc;

    use pricing_api::{App, Stores};
    use pricing_core::jws::{Signer, StoredKey};

    let template = template();
    let resources = resources(&template);
    let routes = gateway_routes(&resources);
    let store = pricing_embedded::EmbeddedStore::open_in_memory().unwrap();
    let key = StoredKey::generate("k".into(), pricing_core::time::Timestamp::now()).unwrap();
    let app = Arc::new(App::new(
        Stores {
            store: store.clone(),
            queue: store,
        },
        Arc::new(Signer::from_keys(&[key]).unwrap()),
        Arc::new(pricing_lambda::auth::AuthorizerClaims),
    ));
    // The whole API in one router (the standalone), and the part each API function serves
    // (shared/lambda/src/wiring.rs).
    let whole = pricing_api::router(app.clone());
    let functions = [
        (
            "EntriesApiFunction",
            pricing_api::entries_router(app.clone()),
        ),
        (
            "ManagementApiFunction",
            pricing_api::management_router(app.clone()),
        ),
        (
            "SimulationsApiFunction",
            pricing_api::simulations_router(app.clone()),
        ),
    ];
    let router_of = |function: &str| {
        &functions
            .iter()
            .find(|(f, _)| *f == function)
            .unwrap_or_else(|| panic!("{function} is not an API function"))
            .1
    };
    let public = ["/health", "/openapi.json"];
    for &(method, route) in pricing_api::ROUTES {
        let path = route
            .split('/')
            .map(|s| if s.starts_with('{') { "x" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        let to = gateway_route(&routes, method, &path)
            .unwrap_or_else(|| panic!("the gateway has no route for {method} {route}"));
        assert_eq!(
            to.public,
            public.contains(&route),
            "{method} {route}: the gateway's authorizer ({to:?})"
        );
        let mut served_by = Vec::new();
        for (function, router) in &functions {
            if serves(router, method, &path).await {
                served_by.push(*function);
            }
        }
        assert_eq!(
            served_by,
            [to.function.as_str()],
            "{method} {route}: the gateway sends it to {}, these functions serve it",
            to.function
        );
        // Every method on the path is answered as the whole API answers it (a wrong
        // method is a 405 naming the allowed ones, wherever the gateway sends it).
        for other in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let to = gateway_route(&routes, other, &path)
                .unwrap_or_else(|| panic!("the gateway has no route for {other} {route}"));
            assert_eq!(
                answer(router_of(&to.function), other, &path).await,
                answer(&whole, other, &path).await,
                "{other} {path} on {} and on the whole API",
                to.function
            );
        }
    }
    // The split this checks: the simulator is its own function's, the entry log the
    // entries-api's, and the rest the management-api's.
    let to = |m: &str, p: &str| gateway_route(&routes, m, p).map(|r| r.function.as_str());
    assert_eq!(to("POST", "/simulations"), Some("SimulationsApiFunction"));
    assert_eq!(
        to("POST", "/projects/p/instances/i/entries"),
        Some("EntriesApiFunction")
    );
    assert_eq!(to("GET", "/projects"), Some("ManagementApiFunction"));
    assert_eq!(to("GET", "/console/app.js"), Some("ManagementApiFunction"));
}

/// Every DynamoDB action and queue each function's code calls is in its policy. The
/// emulator checks no IAM, so the tests passed while, on AWS, the recalculator could not
/// store a calculation (its price parts go by `BatchWriteItem`) nor ask for the sales
/// calculation its log tail triggers (`SendMessage` to the recalc queue), entries-api could
/// not clean up after a failed large append or delete an answered inbox item
/// (`DeleteItem`, which a `Delete` inside `TransactWriteItems` needs too), and the
/// scheduler could not deactivate an instance (its schedule index entry is deleted in the
/// transaction). Found by an outside review. The functions that write the table share its
/// write paths (the recalculator applies the log tail, the scheduler deactivates, the
/// management API deletes subscriptions), so each gets every table action.
#[test]
fn each_function_may_call_what_its_code_calls() {
    use std::collections::BTreeMap;

    let table = [
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:TransactWriteItems",
        "dynamodb:ConditionCheckItem",
    ];
    // Queues each function sends to, from its handlers: a submit wakes the processor; a
    // processing run asks for a sales calculation and dispatches webhooks; so does a
    // calculation (it applies the log tail first); the management API and the scheduler
    // wake, calculate and dispatch; a delivery retries itself.
    let sends: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("EntriesApiFunction", &["ProcessQueue"][..]),
        (
            "ManagementApiFunction",
            &["ProcessQueue", "RecalcQueue", "WebhookQueue"][..],
        ),
        (
            "EntryProcessorFunction",
            &["RecalcQueue", "WebhookQueue"][..],
        ),
        ("RecalculatorFunction", &["RecalcQueue", "WebhookQueue"][..]),
        (
            "SchedulerFunction",
            &["ProcessQueue", "RecalcQueue", "WebhookQueue"][..],
        ),
        ("WebhookDeliveryFunction", &["WebhookQueue"][..]),
    ]);
    let template = template();
    let resources = resources(&template);
    for (function, queues) in &sends {
        let (_, lines) = resources
            .iter()
            .find(|(id, _)| id == function)
            .unwrap_or_else(|| panic!("{function} is not in the template"));
        let statements = statements(lines);
        let on_table = |action: &str| {
            statements.iter().any(|s| {
                s.actions.iter().any(|a| a == action)
                    && s.resources.iter().any(|r| r == "!GetAtt Table.Arn")
                    && s.resources
                        .iter()
                        .any(|r| r.contains("${Table.Arn}/index/*"))
            })
        };
        for action in table {
            assert!(on_table(action), "{function} may not {action} on the table");
        }
        for queue in *queues {
            let sends_to = statements.iter().any(|s| {
                s.actions.iter().any(|a| a == "sqs:SendMessage")
                    && s.resources
                        .iter()
                        .any(|r| r == &format!("!GetAtt {queue}.Arn"))
            });
            assert!(sends_to, "{function} may not send to {queue}");
        }
    }
}

// ------------------------------------------------------------------ queue consumers
// The three SQS consumers: (function, SAM event name, queue). The event source mappings
// keep the logical ids SAM gave them (`{function}{event}`) when they were `Events` of the
// functions.
const CONSUMERS: [(&str, &str, &str); 3] = [
    ("EntryProcessorFunction", "Process", "ProcessQueue"),
    ("RecalculatorFunction", "Recalculate", "RecalcQueue"),
    ("WebhookDeliveryFunction", "Deliver", "WebhookQueue"),
];

fn resource<'a>(resources: &'a [(String, Vec<String>)], id: &str) -> &'a [String] {
    &resources
        .iter()
        .find(|(r, _)| r == id)
        .unwrap_or_else(|| panic!("{id} is not in the template"))
        .1
}

/// A consumer may poll and delete on its own queue only. An SQS `Events` entry of a SAM
/// function makes SAM attach the managed policy AWSLambdaSQSQueueExecutionRole, which
/// allows sqs:ReceiveMessage, sqs:DeleteMessage and sqs:GetQueueAttributes on `*` (every
/// queue of the account), so the mappings are written out as resources and the poller's
/// actions are statements on the function's queue. No statement of the template grants
/// an SQS, DynamoDB, EventBridge or Scheduler action on `*`, and no managed policy of
/// those services is attached.
#[test]
fn queue_consumers_may_poll_only_their_own_queue() {
    let template = template();
    let resources = resources(&template);
    for (id, lines) in of_type(&resources, "AWS::Serverless::Function") {
        assert!(
            !lines.iter().any(|l| l.trim() == "Type: SQS"),
            "{id}: an SQS event (SAM attaches AWSLambdaSQSQueueExecutionRole, on every queue)"
        );
    }
    for (id, lines) in &resources {
        for l in lines {
            for managed in [
                "SQSQueueExecution",
                "AmazonSQS",
                "AmazonDynamoDB",
                "EventBridge",
                "AmazonEventBridgeScheduler",
                "SQSPollerPolicy",
                "DynamoDBCrudPolicy",
            ] {
                assert!(
                    !l.contains(managed),
                    "{id}: a broad managed or template policy: {l}"
                );
            }
        }
        for s in statements(lines) {
            let broad = s.resources.iter().any(|r| {
                let r = r.trim_matches(|c| c == '"' || c == '\'');
                r == "*" || r.ends_with(":*") || r.contains("${AWS::AccountId}:*")
            });
            for action in &s.actions {
                let scoped = ["sqs:", "dynamodb:", "events:", "scheduler:"]
                    .iter()
                    .any(|p| action.starts_with(p))
                    || action.contains('*');
                assert!(!(scoped && broad), "{id}: {action} on {:?}", s.resources);
            }
        }
    }
    let mappings = of_type(&resources, "AWS::Lambda::EventSourceMapping");
    assert_eq!(mappings.len(), CONSUMERS.len(), "one mapping per consumer");
    for (function, event, queue) in CONSUMERS {
        let mapping = resource(&resources, &format!("{function}{event}"));
        let one = |key: &str| {
            let v = property(mapping, key);
            assert_eq!(v.len(), 1, "{function}{event}: one {key}");
            v[0].clone()
        };
        assert_eq!(one("EventSourceArn"), format!("!GetAtt {queue}.Arn"));
        assert_eq!(one("FunctionName"), format!("!Ref {function}"));
        assert_eq!(one("BatchSize"), "10");
        assert_eq!(one("FunctionResponseTypes"), "[ReportBatchItemFailures]");
        let statements = statements(resource(&resources, function));
        for action in [
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
        ] {
            let grants: Vec<&Statement> = statements
                .iter()
                .filter(|s| s.actions.iter().any(|a| a == action))
                .collect();
            assert_eq!(grants.len(), 1, "{function}: {action} once");
            assert_eq!(
                grants[0].resources,
                [format!("!GetAtt {queue}.Arn")],
                "{function}: {action} on its own queue only"
            );
        }
    }
}

/// Each consumer's event source mapping caps its concurrency (`ScalingConfig.
/// MaximumConcurrency`, a parameter of at least 2, the least SQS allows, and at most
/// 1,000) so that a burst of queued work cannot take the account's Lambda concurrency
/// from the API functions or throttle the table; none has reserved concurrency, which
/// would throttle invocations and so count receives toward the dead-letter queue
/// (docs/aws.md, "Consumer concurrency").
#[test]
fn queue_consumers_cap_their_concurrency() {
    let template = template();
    let resources = resources(&template);
    let parameters = section(&template, "Parameters");
    assert!(
        !template.contains("ReservedConcurrentExecutions"),
        "reserved concurrency throttles a consumer instead of slowing its polling"
    );
    let mut caps = BTreeSet::new();
    for (function, event, _) in CONSUMERS {
        let mapping = resource(&resources, &format!("{function}{event}"));
        let i = mapping
            .iter()
            .position(|l| l.trim() == "ScalingConfig:")
            .unwrap_or_else(|| panic!("{function}{event}: no ScalingConfig"));
        let cap = mapping[i + 1]
            .trim()
            .strip_prefix("MaximumConcurrency: !Ref ")
            .unwrap_or_else(|| panic!("{function}{event}: MaximumConcurrency from a parameter"))
            .to_owned();
        let (_, lines) = parameters
            .iter()
            .find(|(p, _)| *p == cap)
            .unwrap_or_else(|| panic!("no parameter {cap}"));
        let number = |key: &str| -> u32 {
            let v = property(lines, key);
            assert_eq!(v.len(), 1, "{cap}: one {key}");
            v[0].parse().unwrap()
        };
        assert_eq!(property(lines, "Type"), ["Number"], "{cap}");
        let (min, max, default) = (number("MinValue"), number("MaxValue"), number("Default"));
        assert!(min >= 2 && max <= 1000, "{cap}: SQS allows 2 ..= 1000");
        assert!((min..=max).contains(&default), "{cap}: default {default}");
        assert!(default <= 100, "{cap}: a cap, not the account's limit");
        caps.insert(cap);
    }
    assert_eq!(caps.len(), CONSUMERS.len(), "a parameter per consumer");
}

/// The HTTP API writes an access log (one JSON line per request) to a log group of the
/// stack with the retention; the line names the request, route, status, latencies and
/// the caller's subject, and never a header (the Authorization token), the body or the
/// query string (docs/aws.md, "API access log").
#[test]
fn the_api_writes_an_access_log_without_credentials_or_bodies() {
    let template = template();
    let resources = resources(&template);
    let api = resource(&resources, "HttpApi");
    let destination = property(api, "DestinationArn");
    assert_eq!(
        destination.len(),
        1,
        "HttpApi: AccessLogSettings.DestinationArn"
    );
    let group = destination[0]
        .strip_prefix("!GetAtt ")
        .and_then(|d| d.strip_suffix(".Arn"))
        .expect("a log group of the stack");
    let lines = resource(&resources, group);
    assert!(
        lines
            .iter()
            .any(|l| l.trim() == "Type: AWS::Logs::LogGroup")
    );
    assert_eq!(
        property(lines, "RetentionInDays"),
        ["!Ref LogRetentionDays"]
    );
    let format = property(api, "Format");
    assert_eq!(format.len(), 1, "HttpApi: AccessLogSettings.Format");
    let format = format[0].trim_matches('\'');
    let line: serde_json::Value = serde_json::from_str(format).expect("the format is JSON");
    for key in ["requestId", "routeKey", "status", "responseLatency"] {
        assert!(line.get(key).is_some(), "the access log has no {key}");
    }
    let lower = format.to_lowercase();
    for secret in [
        "authorization",
        "header",
        "body",
        "$input",
        "querystring",
        "$request.",
    ] {
        assert!(!lower.contains(secret), "the access log may write {secret}");
    }
}

/// The stateful resources outlive their stack and a replacement: the table (the entry log
/// and everything folded from it), the Cognito user pool (the clients' and console users'
/// identities) and the two key secrets (the keys that signed the stored entries and the
/// webhooks). A deleted stack or a replaced resource leaves them to be removed by hand
/// (docs/aws.md, "What a deleted stack keeps").
#[test]
fn stateful_resources_are_retained() {
    let template = template();
    let resources = resources(&template);
    let mut stateful = BTreeSet::new();
    for kind in [
        "AWS::DynamoDB::Table",
        "AWS::Cognito::UserPool",
        "AWS::SecretsManager::Secret",
        "AWS::KMS::Key",
    ] {
        for (id, lines) in of_type(&resources, kind) {
            for policy in ["DeletionPolicy", "UpdateReplacePolicy"] {
                assert_eq!(property(lines, policy), ["Retain"], "{id}: {policy}");
            }
            stateful.insert(id.as_str());
        }
    }
    for id in [
        "Table",
        "UserPool",
        "SigningKeysSecret",
        "SigningPublicKeysSecret",
    ] {
        assert!(stateful.contains(id), "{id} is not checked");
    }
    // Point-in-time recovery and TTL on the attribute the adapters write.
    let table = resource(&resources, "Table");
    assert_eq!(
        property(table, "PointInTimeRecoveryEnabled"),
        ["true"],
        "Table: point-in-time recovery"
    );
    assert_eq!(
        property(table, "AttributeName")
            .into_iter()
            .filter(|a| a == pricing_aws::TTL_ATTRIBUTE)
            .count(),
        1,
        "Table: TTL on {}",
        pricing_aws::TTL_ATTRIBUTE
    );
}

/// A plain Lambda function (the console client's custom resource) logs into a log group
/// of the stack, which has the retention; without one Lambda creates
/// `/aws/lambda/{name}` at the first invocation, kept for ever.
#[test]
fn every_plain_function_logs_into_a_log_group_with_a_retention() {
    let template = template();
    let resources = resources(&template);
    let plain = of_type(&resources, "AWS::Lambda::Function");
    assert!(!plain.is_empty());
    for (id, lines) in plain {
        let group = property(lines, "LogGroup");
        assert_eq!(group.len(), 1, "{id}: LoggingConfig.LogGroup");
        let group = group[0]
            .strip_prefix("!Ref ")
            .expect("a log group of the stack");
        let group = resource(&resources, group);
        assert!(
            group
                .iter()
                .any(|l| l.trim() == "Type: AWS::Logs::LogGroup")
        );
        assert_eq!(
            property(group, "RetentionInDays"),
            ["!Ref LogRetentionDays"]
        );
    }
}

/// The parameters the functions read as whole numbers (quotas, rates, retention days, the
/// key rotation period) let only a plain whole number through. A `Number` parameter is
/// checked as a number but handed to `!Ref` as it was written, so `14.0`, `1e1` or `0.5`
/// passed CloudFormation and then stopped every function's cold start, and `07` slipped
/// past the rule that refuses retention of 1 to 13 days. They are Strings with a pattern,
/// the same range as the code accepts, and their defaults match it.
#[test]
fn whole_number_parameters_admit_only_what_the_functions_read() {
    let template = template();
    let parameters = section(&template, "Parameters");
    let retention = (0..=36_500, Some(36_501));
    let whole = (0..=999_999_999, Some(1_000_000_000));
    for (name, (range, over)) in [
        ("KeyRotationDays", whole.clone()),
        ("TenantRateLimit", whole.clone()),
        (
            "TenantRateWindowSeconds",
            (1..=999_999_999, Some(1_000_000_000)),
        ),
        ("MaxProjectsPerTenant", whole.clone()),
        ("MaxInstancesPerProject", whole.clone()),
        ("MaxSubscriptionsPerScope", whole.clone()),
        ("RetainCalculationsDays", retention.clone()),
        ("RetainPriceHistoryDays", retention.clone()),
        ("RetainDeliveriesDays", retention.clone()),
        ("RetainEventsDays", retention.clone()),
    ] {
        let (_, lines) = parameters
            .iter()
            .find(|(p, _)| p == name)
            .unwrap_or_else(|| panic!("no parameter {name}"));
        assert_eq!(property(lines, "Type"), ["String"], "{name}");
        let pattern = property(lines, "AllowedPattern");
        assert_eq!(pattern.len(), 1, "{name}: one AllowedPattern");
        let pattern = regex_lite::Regex::new(pattern[0].trim_matches('"')).expect(name);
        let admits = |v: &str| pattern.is_match(v);
        for n in [
            *range.start(),
            range.start() + 1,
            9,
            10,
            14,
            99,
            100,
            36_500,
            *range.end(),
        ] {
            if range.contains(&n) {
                assert!(admits(&n.to_string()), "{name}: {n}");
            }
        }
        if *range.start() > 0 {
            assert!(!admits("0"), "{name}: 0");
        }
        if let Some(over) = over {
            assert!(!admits(&over.to_string()), "{name}: {over}");
        }
        for bad in [
            "14.0", "13.5", "0.5", "07", "+7", "-1", "1e1", "", " 7", "7 ", "seven",
        ] {
            assert!(!admits(bad), "{name}: {bad:?}");
        }
        let default = property(lines, "Default");
        assert_eq!(default.len(), 1, "{name}: one Default");
        assert!(admits(default[0].trim_matches('"')), "{name}: default");
    }
}
