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
    assert_eq!(
        template
            .matches("RetentionInDays: !Ref LogRetentionDays")
            .count(),
        functions.len()
    );
}

/// The lines of each top-level resource of template.yaml, by logical id.
fn resources(template: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    for line in template.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            inside = line.trim_end() == "Resources:";
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
/// read the signing keys; the management API reads only the public keys; no other function
/// touches either secret.
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
        set(&["KeyRotatorFunction", "ManagementApiFunction"]),
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
