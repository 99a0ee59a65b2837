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
