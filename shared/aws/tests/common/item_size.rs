//! DynamoDB's item size and write-unit rules, applied to the JSON an adapter sends (for
//! the write-unit measurements: `write_units.rs`, `calculation_units.rs`). The emulator
//! reports no consumed capacity for transactions, so the tests compute it.

use serde_json::Value;

/// The size of an attribute value by DynamoDB's rules (of the ones the adapter writes).
pub fn value_size(v: &Value) -> usize {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => {
            let digits = inner
                .as_str()
                .unwrap_or("")
                .trim_start_matches(['-', '0'])
                .replace('.', "");
            digits.len().div_ceil(2) + 1
        }
        // Base64 on the wire: billed by the decoded bytes.
        "B" => inner.as_str().map_or(0, |b| b.len() / 4 * 3),
        "BOOL" | "NULL" => 1,
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |l| l.iter().map(|e| 1 + value_size(e)).sum())
        }
        "M" => {
            3 + inner.as_object().map_or(0, |m| {
                m.iter().map(|(k, e)| 1 + k.len() + value_size(e)).sum()
            })
        }
        _ => inner.to_string().len(),
    }
}

/// An item's size: its attribute names and values.
pub fn item_size(item: &Value) -> usize {
    item.as_object().map_or(0, |o| {
        o.iter().map(|(name, v)| name.len() + value_size(v)).sum()
    })
}

/// Write units of one item's write outside a transaction (1 per started KB; twice that in
/// a transaction).
pub fn units(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}
