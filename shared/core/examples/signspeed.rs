//! Quick check of entry signing speed: `cargo run --release -p pricing-core --example signspeed`.
fn main() {
    let now = pricing_core::time::Timestamp::parse("2026-01-01T00:00:00Z").expect("valid");
    let key = pricing_core::jws::StoredKey::generate("k".into(), now).expect("key");
    let s = pricing_core::jws::Signer::from_keys(&[key]).expect("signer");
    let payload = br#"{"type":"itemSale","transactionId":"tx-000001","data":{"itemId":"item-1","price":19.99,"quantity":1}}"#;
    let t = std::time::Instant::now();
    let n = 50_000;
    let mut len = 0;
    for _ in 0..n {
        len += s.sign_jws(payload).len();
    }
    println!(
        "{:.0} signatures/s on one core ({len} bytes)",
        n as f64 / t.elapsed().as_secs_f64()
    );
}
