use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn patch(ops: Value) -> Vec<PatchOperation> {
    serde_json::from_value::<json_patch::Patch>(ops)
        .expect("a valid patch")
        .0
}

/// The amplification of the review: one `add`, then `copy` of the root into itself. Each
/// copy doubles the document; on the old code 16 copies built 66 MB.
#[test]
fn copies_from_the_root_stop_at_the_size_limit_before_they_run() {
    let mut ops = vec![json!({"op": "add", "path": "/a", "value": "x".repeat(1000)})];
    for i in 0..40 {
        ops.push(json!({"op": "copy", "from": "", "path": format!("/c{i}")}));
    }
    let mut doc = json!({});
    let err = apply_patch(&mut doc, &patch(Value::Array(ops))).expect_err("refused");
    match err {
        DocumentError::TooLarge {
            operation: Some(op),
            bytes,
        } => {
            // 1 KB doubles past 64 KiB at the 7th copy; the refused size is at most double.
            assert!(op <= 8, "refused at operation {op}");
            assert!(bytes <= 2 * MAX_DOCUMENT_BYTES + 64, "{bytes}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // The working document never grew past the limit.
    assert!(encoded_len(&doc) <= MAX_DOCUMENT_BYTES);
}

#[test]
fn copies_are_bounded_in_total_even_when_each_fits() {
    // A 30 KB value copied and removed again, over and over: each step fits, the clones add up.
    let mut ops = vec![json!({"op": "add", "path": "/a", "value": "x".repeat(30_000)})];
    for _ in 0..20 {
        ops.push(json!({"op": "copy", "from": "/a", "path": "/b"}));
        ops.push(json!({"op": "remove", "path": "/b"}));
    }
    let mut doc = json!({});
    let err = apply_patch(&mut doc, &patch(Value::Array(ops))).expect_err("refused");
    assert!(matches!(err, DocumentError::CopyBudget { .. }), "{err:?}");
}

#[test]
fn moves_are_bounded_in_total_and_a_move_onto_itself_is_free() {
    // A 60 KB value moved there and back 1,000 times: nothing grows, but each move
    // measured it (an outside probe: 0.9 s a patch, 97 s for one 5 MiB request).
    let big = json!({"x": vec![0; 30_000]});
    let mut ops = Vec::new();
    for _ in 0..500 {
        ops.push(json!({"op": "move", "from": "/x", "path": "/y"}));
        ops.push(json!({"op": "move", "from": "/y", "path": "/x"}));
    }
    let mut doc = big.clone();
    let err = apply_patch(&mut doc, &patch(Value::Array(ops))).expect_err("refused");
    assert!(
        matches!(err, DocumentError::MoveBudget { operation: 4 }),
        "{err:?}"
    );
    // A few moves of it are fine.
    let mut doc = big.clone();
    apply_patch(
        &mut doc,
        &patch(json!([
            {"op": "move", "from": "/x", "path": "/y"},
            {"op": "move", "from": "/y", "path": "/z"},
        ])),
    )
    .expect("two moves");
    assert_eq!(doc, json!({"z": vec![0; 30_000]}));
    // A move onto itself changes nothing and costs nothing, but its path must exist.
    let mut doc = big.clone();
    let onto_itself = vec![json!({"op": "move", "from": "/x", "path": "/x"}); 1_000];
    apply_patch(&mut doc, &patch(Value::Array(onto_itself))).expect("no-ops");
    assert_eq!(doc, big);
    let missing = json!([{"op": "move", "from": "/nothing", "path": "/nothing"}]);
    assert!(apply_patch(&mut doc, &patch(missing)).is_err());
    // The root cannot be removed, so it cannot be moved, not even onto itself (as in
    // json-patch, which the property test below holds us to).
    let root = json!([{"op": "move", "from": "", "path": ""}]);
    assert!(apply_patch(&mut json!({}), &patch(root)).is_err());
}

/// The depth bomb: two adds nest a document past what a stored record can decode.
#[test]
fn adds_that_nest_too_deep_are_refused() {
    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, _| json!({ "a": v }))
    }
    let mut doc = json!({});
    let ops = patch(json!([
        {"op": "add", "path": "/x", "value": nested(20)},
        {"op": "add", "path": "/x/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a", "value": nested(20)},
    ]));
    let err = apply_patch(&mut doc, &ops).expect_err("refused");
    assert!(
        matches!(
            err,
            DocumentError::TooDeep {
                operation: Some(1),
                ..
            }
        ),
        "{err:?}"
    );
    // Within the limit it applies.
    let mut doc = json!({});
    apply_patch(
        &mut doc,
        &patch(json!([{"op": "add", "path": "/x", "value": nested(MAX_DOCUMENT_DEPTH - 1)}])),
    )
    .expect("31 levels inside the root fit");
    assert_eq!(depth(&doc), MAX_DOCUMENT_DEPTH);
}

#[test]
fn copy_and_move_carry_the_depth_of_their_source() {
    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, _| json!({ "a": v }))
    }
    let start = json!({"deep": nested(28), "b": {"c": {"d": {"e": {}}}}});
    for op in ["copy", "move"] {
        let mut doc = start.clone();
        let ops = patch(json!([{"op": op, "from": "/deep", "path": "/b/c/d/e/f"}]));
        let err = apply_patch(&mut doc, &ops).expect_err(op);
        assert!(
            matches!(err, DocumentError::TooDeep { .. }),
            "{op}: {err:?}"
        );
    }
}

#[test]
fn too_many_operations_are_refused() {
    let ops: Vec<Value> = (0..=MAX_PATCH_OPERATIONS)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    let err = apply_patch(&mut json!({}), &patch(Value::Array(ops))).expect_err("refused");
    assert!(matches!(err, DocumentError::TooManyOperations { .. }));
}

#[test]
fn test_compares_numbers_by_value() {
    // RFC 6902 section 4.6: "numbers: are considered equal if their values are numerically
    // equal"; money is stored as decimals, so a client's `100` must match a stored `100.0`.
    let mut doc =
        json!({"max": 100.0, "n": 1, "list": [2.0, {"x": 3}], "big": 18446744073709551615u64});
    for (path, value) in [
        ("/max", json!(100)),
        ("/n", json!(1.0)),
        ("/list", json!([2, {"x": 3.0}])),
        (
            "",
            json!({"list": [2, {"x": 3}], "n": 1e0, "max": 1e2, "big": 18446744073709551615u64}),
        ),
    ] {
        apply_patch(
            &mut doc,
            &patch(json!([{"op": "test", "path": path, "value": value}])),
        )
        .unwrap_or_else(|e| panic!("{path} equals {value}: {e}"));
    }
    for (path, value) in [
        ("/max", json!(100.5)),
        ("/max", json!("100")),
        ("/n", json!(true)),
        ("/list", json!([2])),
        ("/list", json!([2, {"x": 3, "y": 4}])),
        ("/big", json!(18446744073709551614u64)),
        ("/big", json!(18446744073709551616.0)),
        ("/n", json!(1.5)),
    ] {
        let err = apply_patch(
            &mut doc,
            &patch(json!([{"op": "test", "path": path, "value": value}])),
        )
        .expect_err("differs");
        assert!(err.to_string().ends_with("value did not match"), "{err}");
    }
    let err = apply_patch(
        &mut doc,
        &patch(json!([{"op": "test", "path": "/none", "value": 1}])),
    )
    .expect_err("no such member");
    assert_eq!(
        err.to_string(),
        "operation '/0' failed at path '/none': path is invalid"
    );
}

#[test]
fn rfc_6902_failures_keep_their_message() {
    let mut doc = json!({"a": 1});
    let err = apply_patch(
        &mut doc,
        &patch(json!([{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 2}])),
    )
    .expect_err("test fails");
    assert_eq!(
        err.to_string(),
        "operation '/1' failed at path '/a': value did not match"
    );
    let err = apply_patch(
        &mut json!({"a": [1]}),
        &patch(json!([{"op": "move", "from": "/x", "path": "/y"}])),
    )
    .expect_err("missing from");
    assert!(
        err.to_string().contains("\"from\" path is invalid"),
        "{err}"
    );
    let err = apply_patch(
        &mut json!({"a": {"b": 1}}),
        &patch(json!([{"op": "move", "from": "/a", "path": "/a/b/c"}])),
    )
    .expect_err("inside itself");
    assert!(err.to_string().contains("inside itself"), "{err}");
}

#[test]
fn update_is_bounded_like_a_patch() {
    let change = DocChange::Update(
        json!({"big": "x".repeat(MAX_DOCUMENT_BYTES)})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let err = apply_change(&mut json!({}), &change).expect_err("too large");
    assert!(matches!(err, DocumentError::TooLarge { .. }));
}

/// A JSON value of bounded size and depth for the property tests.
fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z\"\\\\\u{e9}\n]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c~/]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Pointers into a small space of keys and indexes, so that operations often hit.
fn arb_path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-c]",
            "[0-2]",
            Just("-".to_owned()),
            Just("~1".to_owned())
        ],
        0..3,
    )
    .prop_map(|tokens| tokens.iter().map(|t| format!("/{t}")).collect())
}

fn arb_op() -> impl Strategy<Value = Value> {
    prop_oneof![
        (arb_path(), arb_value()).prop_map(|(p, v)| json!({"op": "add", "path": p, "value": v})),
        (arb_path(), arb_value())
            .prop_map(|(p, v)| json!({"op": "replace", "path": p, "value": v})),
        arb_path().prop_map(|p| json!({"op": "remove", "path": p})),
        (arb_path(), arb_path()).prop_map(|(f, p)| json!({"op": "copy", "from": f, "path": p})),
        (arb_path(), arb_path()).prop_map(|(f, p)| json!({"op": "move", "from": f, "path": p})),
        (arb_path(), arb_value()).prop_map(|(p, v)| json!({"op": "test", "path": p, "value": v})),
    ]
}

proptest! {
    /// The bounded application is RFC 6902 (json-patch's result, op by op), and its running
    /// size is the exact size of the document after every operation.
    #[test]
    fn bounded_patches_agree_with_json_patch(
        start in prop::collection::btree_map("[a-c]", arb_value(), 0..4),
        ops in prop::collection::vec(arb_op(), 1..8),
    ) {
        let start = Value::Object(start.into_iter().collect());
        let ops = patch(Value::Array(ops));
        let mut expected = start.clone();
        // patch_unsafe: json-patch's atomic `patch` panics when its undo fails on some
        // move/remove sequences (the service never calls it).
        let reference = json_patch::patch_unsafe(&mut expected, &ops);
        let mut doc = start.clone();
        let mut bounded = Bounded { size: encoded_len(&doc), copied: 0, moved: 0 };
        let mut ours = Ok(());
        for (i, op) in ops.iter().enumerate() {
            ours = bounded.apply(&mut doc, i, op);
            if ours.is_err() {
                break;
            }
            prop_assert_eq!(bounded.size, encoded_len(&doc), "after operation {}", i);
        }
        prop_assert_eq!(reference.is_ok(), ours.is_ok(), "{:?} vs {:?}", reference, ours);
        if reference.is_ok() {
            prop_assert_eq!(doc, expected);
        }
    }
}

/// json-patch's atomic `patch` panics ("unable to undo applied patches") on this two-step
/// patch: the old apply step called it, so one entry could panic the processor on every
/// retry. The bounded application works on a copy and never undoes.
#[test]
fn a_patch_json_patch_cannot_undo_is_refused_without_a_panic() {
    let ops = patch(json!([
        {"op": "copy", "from": "", "path": "/-"},
        {"op": "move", "from": "/-", "path": "/a/a"}
    ]));
    let err = apply_patch(&mut json!({}), &ops).expect_err("the move has no target");
    assert!(err.to_string().contains("operation '/1'"), "{err}");
}

#[test]
fn parse_unique_refuses_a_member_named_twice_at_any_depth() {
    use super::{ParseError, parse_unique};
    for (json, key) in [
        (r#"{"a": 1, "a": 2}"#, "a"),
        (r#"{"a": {"b": [1, {"c": 1, "c": 1}]}}"#, "c"),
        (r#"[{"x": null}, {"y": 1, "y": 2}]"#, "y"),
    ] {
        match parse_unique(json.as_bytes()) {
            Err(ParseError::Duplicate(e)) => {
                let text = e.to_string();
                assert!(text.contains(&format!("{key:?} twice")), "{text}");
                assert!(text.contains("line 1 column"), "{text}");
            }
            other => panic!("{json}: {other:?}"),
        }
    }
    // The same names in different objects are fine, and what is read is serde_json's.
    let ok = r#"{"a": {"a": 1}, "b": [{"a": -2.5e3}, {"a": 18446744073709551615}], "c": "\u00e9", "d": [true, false, null]}"#;
    assert_eq!(
        parse_unique(ok.as_bytes()).ok(),
        serde_json::from_str::<serde_json::Value>(ok).ok()
    );
    // A name longer than 64 characters is cut in the message.
    let long = format!(r#"{{"{0}": 1, "{0}": 2}}"#, "n".repeat(5_000));
    let Err(ParseError::Duplicate(e)) = parse_unique(long.as_bytes()) else {
        panic!("a duplicate");
    };
    assert!(e.to_string().len() < 200, "{e}");
    // serde_json's reserved names would make a record that does not decode again.
    for reserved in [
        r#"{"$serde_json::private::RawValue": "nope"}"#,
        r#"{"a": 1, "$serde_json::private::RawValue": "[1]"}"#,
        r#"[{"x": {"$serde_json::private::Number": "1"}}]"#,
    ] {
        match parse_unique(reserved.as_bytes()) {
            Err(ParseError::Json(e)) => assert!(e.to_string().contains("reserved"), "{e}"),
            other => panic!("{reserved}: {other:?}"),
        }
    }
    for bad in ["{not json", "{} {}", "", r#"{"a": 1,}"#] {
        assert!(
            matches!(parse_unique(bad.as_bytes()), Err(ParseError::Json(_))),
            "{bad}"
        );
    }
}
