//! Submission of entries (DESIGN.md section 5): request shapes, transaction ids, signing,
//! all-or-nothing validation with pointers, and limits.

use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pricing_core::entry::{ParseOptions, parse_entry};
use pricing_core::jws::{Signer, StoredKey, decode_jws_payload};
use pricing_core::submit::{
    MAX_ENTRIES_PER_REQUEST, MAX_ENTRY_BYTES, Submission, SubmitError, prepare,
};
use pricing_core::time::Timestamp;
use pricing_core::validate::{Errors, FieldError, MAX_COUNT, codes};
use serde_json::{Value, json};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("a valid timestamp")
}

fn now() -> Timestamp {
    ts("2026-05-19T12:00:00Z")
}

fn signer() -> &'static Signer {
    static SIGNER: OnceLock<Signer> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let key = StoredKey::generate("k-test".into(), now()).expect("a key");
        Signer::from_keys(&[key]).expect("a signer")
    })
}

fn sale(item: &str) -> Value {
    json!({"type": "itemSale", "data": {"itemId": item, "price": 19.99}})
}

fn sale_with_id(item: &str, tx: &str) -> Value {
    json!({"type": "itemSale", "transactionId": tx, "data": {"itemId": item, "price": 19.99}})
}

#[track_caller]
fn accepted(body: Value) -> Submission {
    match prepare(&body, signer(), now()) {
        Ok(s) => s,
        Err(e) => panic!("refused: {e:#?}"),
    }
}

#[track_caller]
fn invalid(body: Value) -> Vec<FieldError> {
    match prepare(&body, signer(), now()) {
        Err(SubmitError::Invalid(errors)) => {
            assert!(!errors.is_empty());
            errors
        }
        other => panic!("expected a 400: {other:#?}"),
    }
}

fn pc(errors: &[FieldError]) -> Vec<(&str, &str)> {
    errors
        .iter()
        .map(|e| (e.pointer.as_str(), e.code.as_str()))
        .collect()
}

fn payload(jwt: &str) -> Value {
    decode_jws_payload(jwt).expect("a decodable JWS")
}

fn header(jwt: &str) -> Value {
    let h = jwt.split('.').next().expect("a header");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).expect("base64url")).expect("JSON")
}

/// A compact JWS as a client would send it, signed with a key we do not know.
fn client_jws(payload: &Value) -> String {
    let key = StoredKey::generate("client".into(), now()).expect("a key");
    Signer::from_keys(&[key])
        .expect("a signer")
        .sign_jws(payload.to_string().as_bytes())
}

#[test]
fn a_bare_array_is_accepted() {
    let s = accepted(json!([sale("A"), sale_with_id("B", "tx-2")]));
    assert_eq!(s.entries.len(), 2);
    assert_eq!(s.entries[0].transaction_id, None);
    assert_eq!(
        s.entries[1].transaction_id.as_ref().map(|t| t.as_str()),
        Some("tx-2")
    );
    for e in &s.entries {
        assert_eq!(e.received_at, now());
        assert!(signer().verify_jws(&e.jwt), "our signature verifies");
    }
    // The signed payload is the entry as sent.
    assert_eq!(payload(&s.entries[0].jwt), sale("A"));
    assert_eq!(payload(&s.entries[1].jwt), sale_with_id("B", "tx-2"));
}

#[test]
fn an_object_with_entries_is_accepted() {
    let s = accepted(json!({"entries": [sale("A")]}));
    assert_eq!(s.entries.len(), 1);
    assert_eq!(s.entries[0].transaction_id, None);
    assert_eq!(payload(&s.entries[0].jwt), sale("A"));
    // requestId null is no request id.
    let s = accepted(json!({"requestId": null, "entries": [sale("A")]}));
    assert_eq!(s.entries[0].transaction_id, None);
}

#[test]
fn signed_entries_name_the_key_and_algorithm() {
    let s = accepted(json!([sale("A")]));
    let h = header(&s.entries[0].jwt);
    assert_eq!(h["alg"], "ES256");
    assert_eq!(h["kid"], "k-test");
    assert_eq!(s.entries[0].jwt.split('.').count(), 3);
    // The published key set has that key.
    assert_eq!(signer().jwks()["keys"][0]["kid"], "k-test");
    // A tampered payload does not verify.
    let jwt = &s.entries[0].jwt;
    let mut parts: Vec<&str> = jwt.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(sale("Z").to_string());
    parts[1] = &forged;
    assert!(!signer().verify_jws(&parts.join(".")));
}

#[test]
fn a_request_id_gives_entries_without_one_a_derived_id() {
    let s = accepted(json!({
        "requestId": "req-42",
        "entries": [sale("A"), sale_with_id("B", "own-1"), sale("C")]
    }));
    let ids: Vec<Option<&str>> = s
        .entries
        .iter()
        .map(|e| e.transaction_id.as_ref().map(|t| t.as_str()))
        .collect();
    assert_eq!(ids, [Some("req-42#0"), Some("own-1"), Some("req-42#2")]);
    // The derived id is inside the signed payload, so the record says how it was deduplicated.
    let p0 = payload(&s.entries[0].jwt);
    assert_eq!(p0["transactionId"], "req-42#0");
    assert_eq!(p0["data"], sale("A")["data"]);
    assert_eq!(payload(&s.entries[1].jwt), sale_with_id("B", "own-1"));
    assert_eq!(payload(&s.entries[2].jwt)["transactionId"], "req-42#2");
    for e in &s.entries {
        assert!(signer().verify_jws(&e.jwt));
    }
}

#[test]
fn stored_entries_with_derived_ids_replay() {
    // The processor parses stored payloads again; a derived id must not make them invalid.
    let s = accepted(json!({"requestId": "r", "entries": [sale("A")]}));
    let p = payload(&s.entries[0].jwt);
    let mut errors = Errors::default();
    let entry = parse_entry(&p, "", ParseOptions::default(), &mut errors);
    assert!(errors.is_empty(), "{:#?}", errors.list);
    let entry = entry.expect("an entry");
    assert_eq!(entry.transaction_id, s.entries[0].transaction_id);
    // And a client may resubmit the stored JWS verbatim.
    let again = accepted(json!([s.entries[0].jwt.clone()]));
    assert_eq!(again.entries[0].jwt, s.entries[0].jwt);
    assert_eq!(again.entries[0].transaction_id, s.entries[0].transaction_id);
}

#[test]
fn client_jws_strings_are_stored_verbatim() {
    let with_id = client_jws(&sale_with_id("A", "client-tx"));
    let without_id = client_jws(&sale("B"));
    let s = accepted(json!({"requestId": "rq", "entries": [with_id, without_id, sale("C")]}));
    assert_eq!(s.entries[0].jwt, with_id);
    assert_eq!(s.entries[1].jwt, without_id);
    assert_eq!(
        s.entries[0].transaction_id.as_ref().map(|t| t.as_str()),
        Some("client-tx")
    );
    // The client's payload is not rewritten; the derived id is still used for dedupe.
    assert_eq!(
        s.entries[1].transaction_id.as_ref().map(|t| t.as_str()),
        Some("rq#1")
    );
    assert_eq!(payload(&s.entries[1].jwt), sale("B"));
    // Client signatures are not verified by the service (INTERFACE.md), and not ours.
    assert!(!signer().verify_jws(&with_id));
    assert!(signer().verify_jws(&s.entries[2].jwt));
    // A JWS whose signature does not verify is accepted the same way (only its form is
    // checked: base64url, a header naming an algorithm other than `none`).
    let unsigned = format!(
        "eyJhbGciOiJFUzI1NiJ9.{}.eA",
        URL_SAFE_NO_PAD.encode(sale("D").to_string())
    );
    let s = accepted(json!([unsigned.clone()]));
    assert_eq!(s.entries[0].jwt, unsigned);
}

#[test]
fn client_jws_payloads_are_validated() {
    let bad_payload =
        client_jws(&json!({"type": "itemSale", "data": {"itemId": "A", "price": -1}}));
    assert_eq!(
        pc(&invalid(json!({"entries": [sale("A"), bad_payload]}))),
        [("/entries/1/data/price", codes::RANGE)]
    );
    assert_eq!(pc(&invalid(json!(["not.a-jws"]))), [("/0", codes::FORMAT)]);
    assert_eq!(
        pc(&invalid(json!({"entries": ["a.b.c.d"]}))),
        [("/entries/0", codes::FORMAT)]
    );
    let not_json = format!("eyJhIjoxfQ.{}.sig", URL_SAFE_NO_PAD.encode("not json"));
    assert_eq!(
        pc(&invalid(json!({"entries": [not_json]}))),
        [("/entries/0", codes::FORMAT)]
    );
    // Stored verbatim and served as the entry's JWS, so it must be one a JWS library
    // parses: a header naming its algorithm, a base64url signature.
    let good = URL_SAFE_NO_PAD.encode(sale("A").to_string());
    let alg = URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256"}"#);
    for jws in [
        format!("!!!.{good}.c2ln"),
        format!("{}.{good}.c2ln", URL_SAFE_NO_PAD.encode("hello")),
        format!("{}.{good}.c2ln", URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT"}"#)),
        format!("{alg}.{good}."),
        format!("{alg}.{good}.not a signature"),
        format!("{alg}.{good}.x"),
        format!("{alg}.{good}.c2ln.c2ln"),
        // A header naming a member twice, or `alg: none` with a signature.
        format!(
            "{}.{good}.c2ln",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","alg":"ES256"}"#)
        ),
        format!(
            "{}.{good}.c2ln",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#)
        ),
    ] {
        let errors = invalid(json!({"entries": [jws.clone()]}));
        assert_eq!(pc(&errors), [("/entries/0", codes::FORMAT)], "{jws}");
    }
    accepted(json!([format!("{alg}.{good}.c2ln")]));
    // A member named twice: the service would apply the last value, a client's parser
    // might take the first, and the stored record would say two things.
    for payload in [
        r#"{"type":"itemSale","data":{"itemId":"A","quantity":-1,"quantity":3,"price":10}}"#,
        r#"{"type":"itemSale","type":"itemSale","data":{"itemId":"A","price":10}}"#,
        r#"{"type":"itemSale","data":{"itemId":"A","price":10,"breakdown":[{"a":1,"a":2}]}}"#,
    ] {
        let jws = format!("{alg}.{}.c2ln", URL_SAFE_NO_PAD.encode(payload));
        let errors = invalid(json!([jws]));
        assert_eq!(pc(&errors), [("/0", codes::FORMAT)], "{payload}");
        assert!(errors[0].message.contains("twice"), "{}", errors[0].message);
    }
}

#[test]
fn a_client_jws_naming_a_header_extension_is_refused() {
    // The service implements no JWS extension: one named critical must be refused (RFC
    // 7515 section 4.1.11), and `b64: false` (RFC 7797) says the payload is not the
    // base64url the service read, so a JWS library would read another entry.
    let good = URL_SAFE_NO_PAD.encode(sale("A").to_string());
    let jws = |header: &str| format!("{}.{good}.c2ln", URL_SAFE_NO_PAD.encode(header));
    for header in [
        r#"{"alg":"ES256","crit":["exp"]}"#,
        r#"{"alg":"ES256","crit":[]}"#,
        r#"{"alg":"ES256","b64":false}"#,
        r#"{"alg":"ES256","b64":false,"crit":["b64"]}"#,
        r#"{"alg":"ES256","b64":"false"}"#,
    ] {
        let errors = invalid(json!({"entries": [sale("B"), jws(header)]}));
        assert_eq!(pc(&errors), [("/entries/1", codes::FORMAT)], "{header}");
        assert!(errors[0].message.contains("crit"), "{}", errors[0].message);
    }
    // `b64: true` is the default, and other header members are the client's.
    for header in [
        r#"{"alg":"ES256","b64":true}"#,
        r#"{"alg":"ES256","typ":"JWT","kid":"k"}"#,
    ] {
        assert_eq!(accepted(json!([jws(header)])).entries[0].jwt, jws(header));
    }
}

#[test]
fn an_explicit_id_may_not_take_the_id_another_entry_derives() {
    // A resubmitted service-signed entry carries `{requestId}#{index}`; where that is the id
    // the request gives another of its entries, that entry would be dropped as a duplicate.
    let errors = invalid(json!({"requestId": "order-7", "entries": [
        sale_with_id("A", "order-7#1"),
        sale("B"),
        client_jws(&sale_with_id("C", "order-7#1")),
    ]}));
    assert_eq!(
        pc(&errors),
        [
            ("/entries/0/transactionId", codes::CONFLICT),
            ("/entries/2", codes::CONFLICT)
        ]
    );
    assert!(
        errors[0].message.contains("index 1"),
        "{}",
        errors[0].message
    );
    // The same ids without a clash are fine: the derived form at its own index, or another
    // request id's.
    accepted(json!({"requestId": "order-7", "entries": [
        sale_with_id("A", "order-7#0"),
        sale("B"),
        sale_with_id("C", "order-8#1"),
    ]}));
}

#[test]
fn validation_is_all_or_nothing_with_pointers() {
    let entries = json!([
        sale("A"),
        {"type": "itemRegistration", "data": {
            "itemId": "I", "productId": "P",
            "salesPeriod": {"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
            "priceSettings": {"min": -1, "max": 10, "default": 5}}},
        {"data": {}},
        sale("B"),
        {"type": "itemQuantity", "data": {"itemId": "A", "change": {"relative": 2}}},
        {"type": "itemSale", "timestamp": "2026-05-19T12:06:00Z", "data": {"itemId": "A", "price": 1}}
    ]);
    let errors = invalid(json!({"requestId": "r1", "entries": entries.clone()}));
    assert_eq!(
        pc(&errors),
        [
            ("/entries/1/data/priceSettings/min", codes::RANGE),
            ("/entries/2/type", codes::REQUIRED),
            ("/entries/4/data/change/relative", codes::REMOVED),
            ("/entries/5/timestamp", codes::FUTURE),
        ]
    );
    // The same entries as a bare array point from the root.
    let errors = invalid(entries);
    assert_eq!(errors[0].pointer, "/1/data/priceSettings/min");
    assert_eq!(errors[3].pointer, "/5/timestamp");
}

#[test]
fn request_shape_errors() {
    assert_eq!(pc(&invalid(json!("entries"))), [("", codes::TYPE)]);
    assert_eq!(pc(&invalid(json!(42))), [("", codes::TYPE)]);
    assert_eq!(
        pc(&invalid(json!({"requestId": "r"}))),
        [("/entries", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&invalid(json!({"entries": {"0": sale("A")}}))),
        [("/entries", codes::TYPE)]
    );
    assert_eq!(
        pc(&invalid(json!({"entries": []}))),
        [("/entries", codes::RANGE)]
    );
    assert_eq!(pc(&invalid(json!([]))), [("", codes::RANGE)]);
    assert_eq!(
        pc(&invalid(json!({"requestId": 7, "entries": [sale("A")]}))),
        [("/requestId", codes::TYPE)]
    );
    assert_eq!(
        pc(&invalid(
            json!({"requestId": "has space", "entries": [sale("A")]})
        )),
        [("/requestId", codes::FORMAT)]
    );
    assert_eq!(
        pc(&invalid(json!({"requestId": "", "entries": [sale("A")]}))),
        [("/requestId", codes::FORMAT)]
    );
    // The request id follows the plain id rule: `#` is reserved for the derived ids.
    assert_eq!(
        pc(&invalid(
            json!({"requestId": "r#1", "entries": [sale("A")]})
        )),
        [("/requestId", codes::FORMAT)]
    );
    // At most 100 characters, so that `{requestId}#{index}` stays a valid id.
    accepted(json!({"requestId": "r".repeat(100), "entries": [sale("A")]}));
    assert_eq!(
        pc(&invalid(
            json!({"requestId": "r".repeat(101), "entries": [sale("A")]})
        )),
        [("/requestId", codes::FORMAT)]
    );
    // A bad request id and bad entries are reported together.
    assert_eq!(
        pc(&invalid(
            json!({"requestId": "a/b", "entries": [{"type": "itemSale", "data": {}}]})
        )),
        [
            ("/requestId", codes::FORMAT),
            ("/entries/0/data/itemId", codes::REQUIRED),
            ("/entries/0/data/price", codes::REQUIRED),
        ]
    );
}

#[test]
fn at_most_1000_entries() {
    let list: Vec<Value> = (0..MAX_ENTRIES_PER_REQUEST)
        .map(|i| sale(&format!("i{i}")))
        .collect();
    let s = accepted(json!({"requestId": "big", "entries": list}));
    assert_eq!(s.entries.len(), 1000);
    assert_eq!(
        s.entries[999].transaction_id.as_ref().map(|t| t.as_str()),
        Some("big#999")
    );
    let list: Vec<Value> = (0..=MAX_ENTRIES_PER_REQUEST)
        .map(|i| sale(&format!("i{i}")))
        .collect();
    match prepare(&json!({"entries": list}), signer(), now()) {
        Err(SubmitError::TooLarge { detail, .. }) => {
            assert!(
                detail.contains("1001") && detail.contains("1000"),
                "{detail}"
            )
        }
        other => panic!("expected 413: {other:#?}"),
    }
}

fn big_sale(bytes: usize) -> Value {
    let mut v = sale("A");
    let base = v.to_string().len();
    // `,"breakdown":[]` is not needed: pad through a component name is limited, so pad
    // through an ignored field of data.
    let pad = bytes - base - r#","pad":"""#.len();
    v["data"]["pad"] = json!("x".repeat(pad));
    assert_eq!(v.to_string().len(), bytes);
    v
}

#[track_caller]
fn too_large(body: Value) -> Vec<FieldError> {
    match prepare(&body, signer(), now()) {
        Err(SubmitError::TooLarge { detail, errors }) => {
            assert!(detail.contains(&MAX_ENTRY_BYTES.to_string()), "{detail}");
            errors
        }
        other => panic!("expected 413: {other:#?}"),
    }
}

#[test]
fn entries_are_limited_to_64_kib() {
    accepted(json!([big_sale(MAX_ENTRY_BYTES)]));
    let errors = too_large(json!({"entries": [sale("A"), big_sale(MAX_ENTRY_BYTES + 1)]}));
    assert_eq!(pc(&errors), [("/entries/1", codes::TOO_LARGE)]);
    assert!(errors[0].message.contains("65537"), "{}", errors[0].message);
    // A client JWS counts as sent.
    let jws = client_jws(&big_sale(60_000));
    assert!(jws.len() > MAX_ENTRY_BYTES);
    let errors = too_large(json!([sale("A"), sale("B"), jws]));
    assert_eq!(pc(&errors), [("/2", codes::TOO_LARGE)]);
    // A derived transaction id that pushes an entry over the limit counts too.
    let errors = too_large(json!({"requestId": "r", "entries": [big_sale(MAX_ENTRY_BYTES)]}));
    assert_eq!(pc(&errors), [("/entries/0", codes::TOO_LARGE)]);
}

#[test]
fn timestamps_are_checked_against_the_time_of_receipt() {
    let e = json!([{"type": "itemRemoval", "timestamp": "2026-05-19T12:05:00Z", "data": {"itemId": "A"}}]);
    assert!(prepare(&e, signer(), now()).is_ok());
    assert!(matches!(
        prepare(&e, signer(), ts("2026-05-19T11:59:59Z")),
        Err(SubmitError::Invalid(_))
    ));
}

#[test]
fn every_kind_can_be_submitted() {
    let entries = json!([
        {"type": "productRegistration", "data": {"productId": "P", "capacity": 10}},
        {"type": "itemRegistration", "data": {"itemId": "A", "productId": "P",
            "dates": {"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
            "priceSettings": {"min": 1, "max": 2, "default": 1.5}, "quantity": 5}},
        {"type": "instanceMetadata", "data": {"patch": [{"op": "add", "path": "/dates", "value": []}]}},
        {"type": "itemMetadata", "data": {"itemId": "A", "update": {"seat": "1"}}},
        {"type": "itemProperties", "data": {"itemId": "A", "patch": []}},
        {"type": "productMetadata", "data": {"productId": "P", "patch": [{"op": "add", "path": "/zone", "value": "N"}]}},
        {"type": "productProperties", "data": {"productId": "P", "patch": []}},
        {"type": "itemSale", "data": {"itemId": "A", "price": 1.5, "currency": "EUR",
            "tax": {"vatPercent": 7}, "breakdown": [{"component": "base", "amount": 1.5}]}},
        {"type": "itemQuantity", "data": {"itemId": "A", "change": {"absolute": 5}}},
        {"type": "itemReservation", "data": {"productId": "P", "reserved": 1}},
        {"type": "pricingSchedule", "data": {"interval": "PT30M"}},
        {"type": "instanceActions", "data": {"actions": [{"action": "enable", "date": "2026-06-01T00:00:00Z"}]}},
        {"type": "itemRemoval", "data": {"itemId": "A"}}
    ]);
    let s = accepted(json!({"requestId": "all", "entries": entries}));
    assert_eq!(s.entries.len(), 13);
    for (i, e) in s.entries.iter().enumerate() {
        assert!(signer().verify_jws(&e.jwt));
        assert_eq!(payload(&e.jwt)["transactionId"], format!("all#{i}"));
    }
}

#[test]
fn a_sale_time_in_the_future_is_refused_like_an_entry_time() {
    let at =
        |t: &str| json!({"type": "itemSale", "data": {"itemId": "A", "price": 10, "soldAt": t}});
    assert_eq!(
        pc(&invalid(json!({"entries": [at("2099-01-01T00:00:00Z")]}))),
        [("/entries/0/data/soldAt", codes::FUTURE)]
    );
    let soon = now().0 + chrono::Duration::minutes(4);
    let soon = Timestamp(soon).to_rfc3339();
    assert_eq!(accepted(json!({"entries": [at(&soon)]})).entries.len(), 1);
    assert_eq!(
        accepted(json!({"entries": [at("2020-01-01T00:00:00Z")]}))
            .entries
            .len(),
        1
    );
}

#[test]
fn counts_past_2_pow_53_are_refused_at_their_field() {
    // A reservation of 2^64 - 1 was accepted, and every item of its product then showed
    // `oversold: 18446744073709551615` (an outside probe found it). Every count of an
    // entry has the same bound, so that the sums of an item's and product's counts stay
    // far within 64 bits.
    let max = MAX_COUNT;
    let entries = |n: Value, neg: Value| {
        json!([
            {"type": "itemReservation", "data": {"itemId": "A2", "reserved": n}},
            {"type": "itemReservation", "data": {"productId": "P", "reserved": n}},
            {"type": "itemQuantity", "data": {"itemId": "A", "total": n}},
            {"type": "itemQuantity", "data": {"itemId": "A", "change": {"absolute": n}}},
            {"type": "itemSale", "data": {"itemId": "A", "price": 0, "quantity": n}},
            {"type": "itemSale", "data": {"itemId": "A", "price": 0, "quantity": neg}},
            {"type": "productRegistration", "data": {"productId": "P", "capacity": n}},
            {"type": "itemRegistration", "data": {"itemId": "A", "productId": "P",
                "dates": {"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
                "priceSettings": {"min": 1, "max": 2, "default": 1.5}, "quantity": n}},
            {"type": "productProperties", "data": {"productId": "P",
                "patch": [{"op": "replace", "path": "/capacity", "value": n}]}}
        ])
    };
    let fields = [
        "/0/data/reserved",
        "/1/data/reserved",
        "/2/data/total",
        "/3/data/change/absolute",
        "/4/data/quantity",
        "/5/data/quantity",
        "/6/data/capacity",
        "/7/data/quantity",
        "/8/data/patch/0/value",
    ];
    let neg = -(max as i64);
    assert_eq!(accepted(entries(json!(max), json!(neg))).entries.len(), 9);
    for (n, neg) in [
        (json!(max + 1), json!(neg - 1)),
        (json!(u64::MAX), json!(i64::MIN)),
        (json!(1e20), json!(-1e20)),
    ] {
        let errors = invalid(entries(n.clone(), neg));
        let expected: Vec<_> = fields.iter().map(|f| (*f, codes::RANGE)).collect();
        assert_eq!(pc(&errors), expected, "{n}");
        assert!(
            errors.iter().all(|e| e.message.contains("2^53 - 1")),
            "{errors:#?}"
        );
    }
}

#[test]
fn a_misspelt_data_member_is_refused_not_ignored() {
    // `data` is lenient about members it does not know, but `Quantity` ignored made a sale
    // of 5 count as 1 (an outside probe found it).
    let typo = json!({"type": "itemSale", "transactionId": "t1",
        "data": {"itemId": "A", "Quantity": 5, "price": 10}});
    let errors = invalid(json!({"entries": [sale("B"), typo]}));
    assert_eq!(
        pc(&errors),
        [("/entries/1/data/Quantity", codes::UNKNOWN_FIELD)]
    );
    assert!(
        errors[0].message.contains("`quantity`"),
        "{}",
        errors[0].message
    );
    for (type_name, data, member) in [
        (
            "itemReservation",
            json!({"itemId": "A", "Reserved": 3}),
            "Reserved",
        ),
        ("itemQuantity", json!({"itemId": "A", "TOTAL": 3}), "TOTAL"),
        (
            "itemSale",
            json!({"item_id": "A", "itemId": "A", "price": 1}),
            "item_id",
        ),
        (
            "itemRegistration",
            json!({"itemId": "A", "productId": "P", "sales_period": {}}),
            "sales_period",
        ),
        (
            "productRegistration",
            json!({"productId": "P", "Capacity": 9}),
            "Capacity",
        ),
        (
            "itemSale",
            json!({"itemId": "A", "price": 1, "tax": {"VatPercent": 20}}),
            "tax/VatPercent",
        ),
        (
            "itemSale",
            json!({"itemId": "A", "price": 1, "breakdown": [{"component": "fee", "Amount": 1}]}),
            "breakdown/0/Amount",
        ),
        (
            "itemQuantity",
            json!({"itemId": "A", "change": {"Absolute": 3}}),
            "change/Absolute",
        ),
        (
            "itemRegistration",
            json!({"itemId": "A", "productId": "P", "priceSettings": {"min": 1, "max": 9, "default": 5, "Multiplier": 2}}),
            "priceSettings/Multiplier",
        ),
        (
            "itemRegistration",
            json!({"itemId": "A", "productId": "P", "properties": {"priceSettings": {"min": 1, "max": 9, "default": 5, "multi_plier": 2}}}),
            "properties/priceSettings/multi_plier",
        ),
        (
            "productRegistration",
            json!({"productId": "P", "capacity": 9, "rounding": {"Step": 1}}),
            "rounding/Step",
        ),
        // Changes of properties, as their registrations (an outside probe: `Default` in
        // an update, or added by a patch, was kept and never read).
        (
            "itemProperties",
            json!({"itemId": "A", "update": {"priceSettings": {"min": 1, "max": 9, "default": 5, "Default": 6}}}),
            "update/priceSettings/Default",
        ),
        (
            "itemProperties",
            json!({"itemId": "A", "patch": [{"op": "replace", "path": "/priceSettings", "value": {"min": 1, "max": 9, "default": 5, "Default": 6}}]}),
            "patch/0/value/Default",
        ),
        (
            "itemProperties",
            json!({"itemId": "A", "patch": [{"op": "add", "path": "/priceSettings/Multiplier", "value": 2}]}),
            "patch/0/value",
        ),
        (
            "productProperties",
            json!({"productId": "P", "patch": [{"op": "add", "path": "/rounding/Step", "value": 1}]}),
            "patch/0/value",
        ),
        (
            "productProperties",
            json!({"productId": "P", "patch": [{"op": "add", "path": "/recalculation/sold_percent_step", "value": 5}]}),
            "patch/0/value",
        ),
        // A value moved or copied onto a misspelt name: the name is refused as an add's.
        (
            "itemProperties",
            json!({"itemId": "A", "patch": [{"op": "copy", "from": "/priceSettings/max", "path": "/priceSettings/Default"}]}),
            "patch/0/path",
        ),
        (
            "productProperties",
            json!({"productId": "P", "patch": [{"op": "move", "from": "/x", "path": "/rounding/STEP"}, {"op": "remove", "path": "/y"}]}),
            "patch/0/path",
        ),
    ] {
        let e = json!({"type": type_name, "data": data});
        let errors = invalid(json!({"entries": [e]}));
        let pointer = format!("/entries/0/data/{member}");
        assert!(
            pc(&errors).contains(&(pointer.as_str(), codes::UNKNOWN_FIELD)),
            "{type_name}: {errors:?}"
        );
    }
    // Members that resemble nothing known stay lenient.
    let extra =
        json!({"type": "itemSale", "data": {"itemId": "A", "price": 1, "channel": "box office"}});
    assert_eq!(accepted(json!({"entries": [extra]})).entries.len(), 1);
}

#[test]
fn a_misspelt_envelope_member_is_refused_not_ignored() {
    // Entries are lenient about members they do not know, but one that is a known member
    // spelt another way would be ignored with what it says: a retry with
    // `transactionID` would count the sale twice.
    let typo =
        json!({"type": "itemSale", "transactionID": "t1", "data": {"itemId": "A", "price": 10}});
    assert_eq!(
        pc(&invalid(json!({"entries": [sale("B"), typo]}))),
        [("/entries/1/transactionID", codes::UNKNOWN_FIELD)]
    );
    let errors = invalid(json!({"request_id": "r1", "entries": [sale("A")]}));
    assert_eq!(pc(&errors), [("/request_id", codes::UNKNOWN_FIELD)]);
    assert!(
        errors[0].message.contains("`requestId`"),
        "{}",
        errors[0].message
    );
    assert_eq!(
        pc(&invalid(json!({"Entries": [sale("A")]}))),
        [
            ("/Entries", codes::UNKNOWN_FIELD),
            ("/entries", codes::REQUIRED)
        ]
    );
    // A client's JWS too; but not one the service signed (a client resubmitting its log:
    // accepted before the rule), which is read as it was.
    let jws = client_jws(
        &json!({"type": "itemSale", "Transaction-Id": "t2", "data": {"itemId": "A", "price": 10}}),
    );
    assert_eq!(
        pc(&invalid(json!([jws]))),
        [("/0/Transaction-Id", codes::UNKNOWN_FIELD)]
    );
    let ours = signer().sign_jws(
        json!({"type": "itemSale", "Timestamp": "x", "data": {"itemId": "A", "price": 10}})
            .to_string()
            .as_bytes(),
    );
    accepted(json!([ours]));
    let ours = signer().sign_jws(
        json!({"type": "productRegistration", "data": {"productId": "."}})
            .to_string()
            .as_bytes(),
    );
    accepted(json!([ours]));
    // What resembles nothing known stays lenient.
    accepted(
        json!({"entries": [{"type": "itemSale", "source": "box office", "data": {"itemId": "A", "price": 10}}], "batch": 7}),
    );
}

#[test]
fn a_registration_may_not_name_a_dot_segment() {
    // `.` and `..` are URL path segments no client sends: the item could not be read.
    for (kind, key) in [
        ("itemRegistration", "itemId"),
        ("productRegistration", "productId"),
    ] {
        for id in [".", ".."] {
            let mut data = json!({"itemId": "A", "productId": "P",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
                "priceSettings": {"min": 1, "max": 2, "default": 1}});
            data[key] = json!(id);
            let errors = invalid(json!([{"type": kind, "data": data}]));
            let at = format!("/0/data/{key}");
            assert_eq!(pc(&errors), [(at.as_str(), codes::FORMAT)], "{kind} {id}");
        }
    }
    // Other dotted ids are fine, and entries naming an existing `.` item still parse
    // (one registered before the rule).
    accepted(json!([{"type": "productRegistration", "data": {"productId": "..."}}]));
    accepted(json!([{"type": "itemSale", "data": {"itemId": ".", "price": 10}}]));
}

#[test]
fn resubmitted_entries_are_verified_a_few_times_per_request() {
    // Each check is a signature verification: a request of refused JWS entries naming the
    // service's key id must not buy a thousand of them. The first 16 are checked.
    let ours = signer().sign_jws(
        json!({"type": "itemSale", "Timestamp": "x", "data": {"itemId": "A", "price": 10}})
            .to_string()
            .as_bytes(),
    );
    accepted(json!(vec![ours.clone(); 16]));
    let errors = invalid(json!(vec![ours; 17]));
    assert_eq!(pc(&errors), [("/16/Timestamp", codes::UNKNOWN_FIELD)]);
}

#[test]
fn a_price_setting_in_a_patch_or_update_has_the_registration_rules() {
    // `{"op": "replace", "path": "/priceSettings/max", "value": 95.1234567}` passed
    // submission and was rejected at processing (`invalidDocument`); a negative value in
    // the same place was a 400 at submission already (an outside probe found it).
    let patch = |path: &str, value: Value| {
        json!({"type": "itemProperties", "data": {"itemId": "A",
            "patch": [{"op": "replace", "path": path, "value": value}]}})
    };
    assert_eq!(
        pc(&invalid(json!({"entries": [
            patch("/priceSettings/max", json!(95.1234567)),
            patch("/priceSettings", json!({"min": 1.0000001, "max": 2})),
            patch("", json!({"priceSettings": {"default": -1}})),
            {"type": "itemProperties", "data": {"itemId": "A",
                "update": {"priceSettings": {"min": 0.1234567}}}}
        ]}))),
        [
            ("/entries/0/data/patch/0/value", codes::FORMAT),
            ("/entries/1/data/patch/0/value/min", codes::FORMAT),
            (
                "/entries/2/data/patch/0/value/priceSettings/default",
                codes::RANGE
            ),
            ("/entries/3/data/update/priceSettings/min", codes::FORMAT),
        ]
    );
    // Six decimals, and a multiplier of any precision, as a registration takes them.
    let ok = accepted(json!({"entries": [
        patch("/priceSettings/max", json!(95.123456)),
        patch("/priceSettings/multiplier", json!(1.23456789))
    ]}));
    assert_eq!(ok.entries.len(), 2);
    // A member of the wrong type, as a registration would refuse it (they were a 200,
    // then an `invalidDocument` rejection).
    assert_eq!(
        pc(&invalid(json!({"entries": [
            patch("/priceSettings/min", json!("10")),
            patch("/dynamicPricing", json!("no")),
            patch("", json!({"dynamicPricing": 1, "priceSettings": {"max": [2]}})),
            {"type": "itemProperties", "data": {"itemId": "A",
                "update": {"priceSettings": {"multiplier": "x"}}}}
        ]}))),
        [
            ("/entries/0/data/patch/0/value", codes::TYPE),
            ("/entries/1/data/patch/0/value", codes::TYPE),
            (
                "/entries/2/data/patch/0/value/priceSettings/max",
                codes::TYPE
            ),
            ("/entries/2/data/patch/0/value/dynamicPricing", codes::TYPE),
            (
                "/entries/3/data/update/priceSettings/multiplier",
                codes::TYPE
            ),
        ]
    );
    // A member a later operation sets again is judged as it ends, at processing.
    let ok = accepted(json!({"entries": [
        {"type": "itemProperties", "data": {"itemId": "A", "patch": [
            {"op": "replace", "path": "/priceSettings/min", "value": "soon"},
            {"op": "replace", "path": "/priceSettings/min", "value": 10}
        ]}}
    ]}));
    assert_eq!(ok.entries.len(), 1);
}

#[test]
fn a_pricing_model_is_checked_member_by_member_at_each_members_pointer() {
    // An outside probe found `{"type": "pace", "maxstepchange": 0.1}` stored without its
    // cap, and a tier written `uptoSoldPercent` stored as a catch-all placed first; range
    // errors pointed at the whole model, and a timeBased multiplier of 1e308 priced at
    // the item's min (its interpolation overflowed).
    let product = |model: Value| {
        json!({"type": "productRegistration",
            "data": {"productId": "P", "capacity": 10, "pricingModel": model}})
    };
    assert_eq!(
        pc(&invalid(json!({"entries": [
            product(json!({"type": "pace", "maxstepchange": 0.1})),
            product(json!({"type": "tiers", "tiers": [
                {"uptoSoldPercent": 20, "multiplier": 0.8},
                {"upToSoldPercent": 150, "multiplier": 1.5}]})),
            product(json!({"type": "pace", "Sensitivity": 2, "curve": 0})),
            product(json!({"type": "timeBased", "steps": [
                {"daysBefore": 0, "multiplier": 1e308}, {"days_before": 3, "multiplier": 1}]})),
            product(json!({"type": "timeBased", "steps": []})),
            product(json!({"type": "tiers", "tiers": [{"multiplier": "x"}], "maxStepChange": 0})),
            product(json!({"type": "pace", "sensitivity": 1e308})),
        ]}))),
        [
            (
                "/entries/0/data/pricingModel/maxstepchange",
                codes::UNKNOWN_FIELD
            ),
            (
                "/entries/1/data/pricingModel/tiers/0/uptoSoldPercent",
                codes::UNKNOWN_FIELD
            ),
            (
                "/entries/1/data/pricingModel/tiers/1/upToSoldPercent",
                codes::RANGE
            ),
            (
                "/entries/2/data/pricingModel/Sensitivity",
                codes::UNKNOWN_FIELD
            ),
            ("/entries/2/data/pricingModel/curve", codes::RANGE),
            (
                "/entries/3/data/pricingModel/steps/0/multiplier",
                codes::RANGE
            ),
            (
                "/entries/3/data/pricingModel/steps/1/days_before",
                codes::UNKNOWN_FIELD
            ),
            (
                "/entries/3/data/pricingModel/steps/1/daysBefore",
                codes::REQUIRED
            ),
            ("/entries/4/data/pricingModel/steps", codes::RANGE),
            ("/entries/5/data/pricingModel/maxStepChange", codes::RANGE),
            (
                "/entries/5/data/pricingModel/tiers/0/multiplier",
                codes::TYPE
            ),
            ("/entries/6/data/pricingModel/sensitivity", codes::RANGE),
        ]
    );
    // Every model at its limits, and by name.
    let ok = accepted(json!({"entries": [
        product(json!({"type": "pace", "sensitivity": 10, "curve": 10, "maxStepChange": 100})),
        product(json!({"type": "timeBased", "steps": [
            {"daysBefore": 36525, "multiplier": 1000}, {"daysBefore": 0, "multiplier": 0}]})),
        product(json!({"type": "tiers", "tiers": [
            {"upToSoldPercent": 100, "multiplier": 1000}, {"multiplier": 0}]})),
        product(json!("fixed")),
        product(json!({"type": "revenue", "maxStepChange": 0.25})),
        // null is absent, as everywhere in `data` (and as the model's parser reads it).
        product(json!({"type": "pace", "maxStepChange": null})),
    ]}));
    assert_eq!(ok.entries.len(), 6);
}

#[test]
fn a_pricing_model_or_rounding_in_a_product_patch_has_the_registration_rules() {
    // `{"op": "replace", "path": "/pricingModel", "value": "bogus"}` and a rounding step
    // of 0 passed submission and were rejected at processing (`invalidDocument`), where
    // the same values in a registration were a 400 (an outside probe found it).
    let patch = |path: &str, value: Value| {
        json!({"type": "productProperties", "data": {"productId": "P",
            "patch": [{"op": "replace", "path": path, "value": value}]}})
    };
    assert_eq!(
        pc(&invalid(json!({"entries": [
            patch("/pricingModel", json!("bogus")),
            patch("/pricingModel", json!({"type": "pace", "maxstepchange": 0.1})),
            patch("/rounding", json!({"step": 0})),
            patch("/rounding/step", json!(0.0000001)),
            patch("", json!({"rounding": {"Step": 1}, "pricingModel": {"type": "tiers", "tiers": []}})),
            {"type": "productProperties", "data": {"productId": "P",
                "update": {"pricingModel": {"type": "pace", "curve": -1}}}},
        ]}))),
        [
            ("/entries/0/data/patch/0/value", codes::FORMAT),
            (
                "/entries/1/data/patch/0/value/maxstepchange",
                codes::UNKNOWN_FIELD
            ),
            ("/entries/2/data/patch/0/value/step", codes::RANGE),
            ("/entries/3/data/patch/0/value", codes::FORMAT),
            (
                "/entries/4/data/patch/0/value/pricingModel/tiers",
                codes::RANGE
            ),
            (
                "/entries/4/data/patch/0/value/rounding/Step",
                codes::UNKNOWN_FIELD
            ),
            ("/entries/5/data/update/pricingModel/curve", codes::RANGE),
        ]
    );
    let ok = accepted(json!({"entries": [
        patch("/pricingModel", json!("pace")),
        patch("/pricingModel", Value::Null),
        patch("/rounding", json!({"step": 0.5})),
        patch("/rounding/step", json!(1)),
    ]}));
    assert_eq!(ok.entries.len(), 4);
}

#[test]
fn a_whole_price_settings_in_an_item_patch_or_update_has_the_registration_rules() {
    // `replace /priceSettings {"min": 50, "max": 40, "default": 45}` and an update with
    // the default above the max passed submission and were rejected at processing, where
    // the same settings in a registration were a 400 (an outside probe found it). Only a
    // whole priceSettings that no later operation changes is judged whole: a later one
    // may still complete or mend it.
    let patch =
        |ops: Value| json!({"type": "itemProperties", "data": {"itemId": "A", "patch": ops}});
    let replace = |value: Value| json!({"op": "replace", "path": "/priceSettings", "value": value});
    assert_eq!(
        pc(&invalid(json!({"entries": [
            patch(json!([replace(json!({"min": 50, "max": 40, "default": 45}))])),
            patch(json!([replace(json!({"min": 10, "max": 40}))])),
            {"type": "itemProperties", "data": {"itemId": "A",
                "update": {"priceSettings": {"min": 10, "max": 20, "default": 30}}}},
            patch(json!([
                replace(json!({"min": 10, "max": 40, "default": 20})),
                {"op": "test", "path": "/priceSettings/min", "value": 10},
                {"op": "add", "path": "/dynamicPricing", "value": false},
            ])),
        ]}))),
        [
            ("/entries/0/data/patch/0/value/max", codes::RANGE),
            ("/entries/1/data/patch/0/value/default", codes::REQUIRED),
            ("/entries/2/data/update/priceSettings/default", codes::RANGE),
        ]
    );
    let ok = accepted(json!({"entries": [
        patch(json!([replace(json!({"min": 10, "max": 40, "default": 20}))])),
        // Completed by a later operation: judged at processing, as before.
        patch(json!([
            replace(json!({"min": 10, "max": 40})),
            {"op": "add", "path": "/priceSettings/default", "value": 20},
        ])),
        {"type": "itemProperties", "data": {"itemId": "A",
            "update": {"priceSettings": {"min": 0, "max": 0, "default": 0}}}},
    ]}));
    assert_eq!(ok.entries.len(), 3);
}

#[test]
fn a_recalculation_in_a_product_patch_or_update_has_the_registration_rules() {
    // `soldPercentStep` 0, -5 or 101 in a registration was a 400 naming the field; in a
    // productProperties patch it was a 200, rejected at processing (an outside probe).
    let patch = |path: &str, value: Value| {
        json!({"type": "productProperties", "data": {"productId": "P",
            "patch": [{"op": "add", "path": path, "value": value}]}})
    };
    assert_eq!(
        pc(&invalid(json!({"entries": [
            patch("/recalculation", json!({"soldPercentStep": 0})),
            patch("/recalculation/soldPercentStep", json!(101)),
            patch("/recalculation", json!({"SoldPercentStep": 5})),
            {"type": "productProperties", "data": {"productId": "P",
                "update": {"recalculation": {"soldPercentStep": -5}}}},
            patch("/recalculation", json!(5)),
        ]}))),
        [
            (
                "/entries/0/data/patch/0/value/soldPercentStep",
                codes::RANGE
            ),
            ("/entries/1/data/patch/0/value", codes::RANGE),
            (
                "/entries/2/data/patch/0/value/SoldPercentStep",
                codes::UNKNOWN_FIELD
            ),
            (
                "/entries/2/data/patch/0/value/soldPercentStep",
                codes::REQUIRED
            ),
            (
                "/entries/3/data/update/recalculation/soldPercentStep",
                codes::RANGE
            ),
            ("/entries/4/data/patch/0/value", codes::TYPE),
        ]
    );
    let ok = accepted(json!({"entries": [
        patch("/recalculation", json!({"soldPercentStep": 5})),
        patch("/recalculation/soldPercentStep", json!(100)),
        patch("/recalculation", Value::Null),
        // Built by two operations: judged whole at processing (the reviewer's case).
        {"type": "productProperties", "data": {"productId": "P", "patch": [
            {"op": "add", "path": "/recalculation", "value": {}},
            {"op": "add", "path": "/recalculation/soldPercentStep", "value": 5},
        ]}},
        {"type": "productProperties", "data": {"productId": "P", "patch": [
            {"op": "add", "path": "/pricingModel", "value": {"type": "tiers", "tiers": []}},
            {"op": "add", "path": "/pricingModel/tiers/-", "value": {"multiplier": 1}},
        ]}},
    ]}));
    assert_eq!(ok.entries.len(), 5);
}
