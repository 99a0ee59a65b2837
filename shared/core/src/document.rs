//! The JSON documents the service keeps (instance `meta`, item and product metadata and
//! properties) and the bounded application of changes to them.
//!
//! A document is at most [`MAX_DOCUMENT_BYTES`] of compact JSON and [`MAX_DOCUMENT_DEPTH`]
//! levels deep, at every moment, not only at the end of a change: a patch is applied one
//! operation at a time, and the size it would reach is computed *before* each operation
//! runs, so `copy` from the root can never build a document larger than the limit, however
//! many operations follow. `copy` clones its source, so the bytes a patch may copy are
//! bounded too ([`MAX_PATCH_COPY_BYTES`]), and so are the bytes a patch may move
//! ([`MAX_PATCH_MOVE_BYTES`]: a move measures what it moves, and can be repeated there and
//! back). The work of one change is therefore O(entry + document + copy and move budgets),
//! independent of the number of operations.
//!
//! Depth matters beyond memory: a stored record must decode again, and serde_json refuses
//! input nested deeper than 128 levels. 32 levels leave room for the record around a
//! document.

use std::io;

use json_patch::jsonptr::Pointer;
use json_patch::{PatchOperation, jsonptr::index::Index};
use serde_json::{Map, Value};

use crate::entry::DocChange;

mod compact;
pub use compact::{CompactObject, PlainValue, plain_map};

/// Largest document, as compact JSON, at any point of a change.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Deepest document: the root object is level 1, a value inside it level 2, and so on.
pub const MAX_DOCUMENT_DEPTH: usize = 32;
/// Most operations in one JSON Patch (checked at submit).
pub const MAX_PATCH_OPERATIONS: usize = 1_000;
/// Most bytes the `copy` operations of one patch may clone, in total.
pub const MAX_PATCH_COPY_BYTES: usize = 4 * MAX_DOCUMENT_BYTES;
/// Most bytes the `move` operations of one patch may move, in total (a move measures
/// what it moves: its size and depth).
pub const MAX_PATCH_MOVE_BYTES: usize = 4 * MAX_DOCUMENT_BYTES;

/// Why [`parse_unique`] refused its input; each says where (serde_json's line and column).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// An object names a member twice.
    #[error("{0}")]
    Duplicate(serde_json::Error),
    /// Not JSON, or more than one value.
    #[error("{0}")]
    Json(serde_json::Error),
}

/// Whether serde_json reserves a member named `name` for itself: with the workspace's
/// `raw_value`, it reads an object whose first member is named `$serde_json::private::...`
/// as one of its own values (the member's string parsed as JSON), so a stored document
/// holding one would not read back as it was. Documents never hold one: request bodies
/// ([`parse_unique`]) and patch paths (`entry.rs`) refuse them.
pub fn is_reserved_member(name: &str) -> bool {
    name.starts_with("$serde_json::private::")
}

/// Parses one JSON value in which no object names a member twice. Where a member repeats,
/// serde_json keeps the last value and another parser may keep the first, so the input
/// says two things: the service refuses it rather than pick one (a request body, a
/// client's JWS, which is stored as it came). A member name that serde_json reserves for
/// itself (`$serde_json::private::...`) is refused as not JSON: stored, the record would
/// not decode. A member named twice is found as it is read, before any syntax error
/// after it.
pub fn parse_unique(bytes: &[u8]) -> Result<Value, ParseError> {
    use serde::de::DeserializeSeed;

    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = compact::Values { strict: true }
        .deserialize(&mut de)
        .map_err(|e| {
            if e.to_string().starts_with(DUPLICATE) {
                ParseError::Duplicate(e)
            } else {
                ParseError::Json(e)
            }
        })?;
    de.end().map_err(ParseError::Json)?;
    Ok(value)
}

/// The start of the error [`parse_unique`] gives for a member named twice.
const DUPLICATE: &str = "an object names the member";

/// A member's name as JSON, cut to 64 characters (for error messages).
fn quoted(key: &str) -> String {
    match key.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", Value::from(&key[..end])),
        None => Value::from(key).to_string(),
    }
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// An operation failed as RFC 6902 defines (`test` mismatch, a missing path, ...).
    #[error("{0}")]
    Patch(String),
    #[error("{}the document would have {bytes} bytes; at most {MAX_DOCUMENT_BYTES}", at_op(.operation))]
    TooLarge {
        operation: Option<usize>,
        bytes: usize,
    },
    #[error("{}the document would be {depth} levels deep; at most {MAX_DOCUMENT_DEPTH}", at_op(.operation))]
    TooDeep {
        operation: Option<usize>,
        depth: usize,
    },
    #[error(
        "operation '/{operation}': the patch copies more than {MAX_PATCH_COPY_BYTES} bytes in all"
    )]
    CopyBudget { operation: usize },
    #[error(
        "operation '/{operation}': the patch moves more than {MAX_PATCH_MOVE_BYTES} bytes in all"
    )]
    MoveBudget { operation: usize },
    #[error("the patch has {count} operations; at most {MAX_PATCH_OPERATIONS}")]
    TooManyOperations { count: usize },
    #[error("the changed document must stay a JSON object")]
    NotAnObject,
}

fn at_op(operation: &Option<usize>) -> String {
    operation.map_or_else(String::new, |i| format!("operation '/{i}': "))
}

/// Counts the bytes serde_json writes, without keeping them.
struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The length of `value` as compact JSON (what the stores keep).
pub fn encoded_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and a `Value` always serializes.
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

/// Nesting levels of `value`: a scalar is 0, an empty object or array 1, `{"a": {}}` 2.
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks a whole document against the size and depth limits (documents given at
/// registration or instance creation).
pub fn check_document(doc: &Map<String, Value>) -> Result<(), DocumentError> {
    let bytes = encoded_len(doc);
    if bytes > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::TooLarge {
            operation: None,
            bytes,
        });
    }
    let depth = 1 + doc.values().map(depth).max().unwrap_or(0);
    if depth > MAX_DOCUMENT_DEPTH {
        return Err(DocumentError::TooDeep {
            operation: None,
            depth,
        });
    }
    Ok(())
}

/// The depth a document reaches when `value` is placed at `path` (its tokens count the
/// levels above it).
pub fn depth_at(path: &Pointer, value: &Value) -> usize {
    path.count() + depth(value)
}

/// Applies `change` to `doc` within the limits. On error `doc` may be partly changed:
/// callers work on a copy (see `state::changed_document`).
pub fn apply_change(doc: &mut Value, change: &DocChange) -> Result<(), DocumentError> {
    apply_change_ignoring(doc, change, &[])
}

/// [`apply_change`] without what touches the top-level fields `ignored` (deprecated fields
/// a document accepts and ignores, e.g. an item's `quantity`): a patch operation whose
/// `path` or `from` lies in such a field is skipped (the others keep their numbers in
/// error messages), an `update` key naming one is left out.
pub fn apply_change_ignoring(
    doc: &mut Value,
    change: &DocChange,
    ignored: &[&str],
) -> Result<(), DocumentError> {
    match change {
        DocChange::Patch(patch) if ignored.is_empty() => apply_patch(doc, &patch.0),
        DocChange::Patch(patch) => {
            apply_patch_skipping(doc, &patch.0, |op| touches_any(op, ignored))
        }
        DocChange::Update(map) => {
            let Value::Object(target) = doc else {
                return Err(DocumentError::NotAnObject);
            };
            // The values come from the entry (at most 64 KiB): measure once, at the end.
            for (k, v) in map.iter().filter(|(k, _)| !ignored.contains(&k.as_str())) {
                if v.is_null() {
                    target.remove(k);
                } else {
                    let depth = 1 + depth(v);
                    if depth > MAX_DOCUMENT_DEPTH {
                        return Err(DocumentError::TooDeep {
                            operation: None,
                            depth,
                        });
                    }
                    target.insert(k.clone(), v.clone());
                }
            }
            let bytes = encoded_len(target);
            if bytes > MAX_DOCUMENT_BYTES {
                return Err(DocumentError::TooLarge {
                    operation: None,
                    bytes,
                });
            }
            Ok(())
        }
    }
}

/// Applies RFC 6902 operations one by one, refusing any operation that would take the
/// document past a limit before it runs.
pub fn apply_patch(doc: &mut Value, ops: &[PatchOperation]) -> Result<(), DocumentError> {
    apply_patch_skipping(doc, ops, |_| false)
}

/// Whether `op` reads or writes inside one of the top-level fields `keys`.
pub fn touches_any(op: &PatchOperation, keys: &[&str]) -> bool {
    let at = |p: &Pointer| {
        p.first()
            .is_some_and(|t| keys.contains(&t.decoded().as_ref()))
    };
    match op {
        PatchOperation::Add(a) => at(&a.path),
        PatchOperation::Remove(r) => at(&r.path),
        PatchOperation::Replace(r) => at(&r.path),
        PatchOperation::Test(t) => at(&t.path),
        PatchOperation::Move(m) => at(&m.path) || at(&m.from),
        PatchOperation::Copy(c) => at(&c.path) || at(&c.from),
    }
}

/// [`apply_patch`] without the operations `skip` picks (the others keep their numbers).
fn apply_patch_skipping(
    doc: &mut Value,
    ops: &[PatchOperation],
    skip: impl Fn(&PatchOperation) -> bool,
) -> Result<(), DocumentError> {
    if ops.len() > MAX_PATCH_OPERATIONS {
        return Err(DocumentError::TooManyOperations { count: ops.len() });
    }
    let mut bounded = Bounded {
        size: encoded_len(doc),
        copied: 0,
        moved: 0,
    };
    for (i, op) in ops.iter().enumerate() {
        if !skip(op) {
            bounded.apply(doc, i, op)?;
        }
    }
    // The running size is exact; measure once more so that no corner of pointer
    // resolution can let a document through that the stores would refuse.
    let bytes = encoded_len(doc);
    debug_assert_eq!(bytes, bounded.size, "running size of a patch drifted");
    if bytes > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::TooLarge {
            operation: None,
            bytes,
        });
    }
    Ok(())
}

/// The running size of the document and the bytes copied and moved so far.
struct Bounded {
    size: usize,
    copied: usize,
    moved: usize,
}

impl Bounded {
    fn apply(
        &mut self,
        doc: &mut Value,
        i: usize,
        op: &PatchOperation,
    ) -> Result<(), DocumentError> {
        match op {
            // RFC 6902 section 4.6: numbers are equal when their values are (`100` and
            // `100.0`; json-patch compares the JSON types too, and money is stored as
            // decimals whatever a client wrote).
            PatchOperation::Test(t) => match doc.pointer(t.path.as_str()) {
                None => Err(failed(i, &t.path, PATH_INVALID)),
                Some(v) if same_value(v, &t.value) => Ok(()),
                Some(_) => Err(failed(i, &t.path, "value did not match")),
            },
            PatchOperation::Add(a) => {
                self.check_depth(i, depth_at(&a.path, &a.value))?;
                let size = size_after_insert(doc, self.size, &a.path, encoded_len(&a.value));
                self.check_size(i, size)?;
                run(doc, i, op)?;
                self.size = size;
                Ok(())
            }
            PatchOperation::Replace(r) => {
                self.check_depth(i, depth_at(&r.path, &r.value))?;
                let old = doc.pointer(r.path.as_str()).map(encoded_len);
                let size = match old {
                    Some(old) => self.size - old + encoded_len(&r.value),
                    None => self.size, // the operation fails: the path does not exist
                };
                self.check_size(i, size)?;
                run(doc, i, op)?;
                self.size = size;
                Ok(())
            }
            PatchOperation::Remove(r) => {
                let size = size_after_remove(doc, self.size, &r.path);
                run(doc, i, op)?;
                self.size = size;
                Ok(())
            }
            PatchOperation::Copy(c) => {
                let Some(source) = doc.pointer(c.from.as_str()) else {
                    return run(doc, i, op); // fails: "from" path is invalid
                };
                self.check_depth(i, depth_at(&c.path, source))?;
                let len = encoded_len(source);
                self.copied = self.copied.saturating_add(len);
                if self.copied > MAX_PATCH_COPY_BYTES {
                    return Err(DocumentError::CopyBudget { operation: i });
                }
                let size = size_after_insert(doc, self.size, &c.path, len);
                self.check_size(i, size)?;
                run(doc, i, op)?;
                self.size = size;
                Ok(())
            }
            PatchOperation::Move(m) => {
                // A move never clones: the value is taken out and put back at `path`; the
                // size of the second step is computed on the document in between (array
                // indexes along `path` may have shifted).
                let Some(source) = doc.pointer(m.from.as_str()) else {
                    return run(doc, i, op); // fails: "from" path is invalid
                };
                if m.path == m.from && !m.from.is_empty() {
                    return Ok(()); // a value moved onto itself: nothing changes
                }
                if m.path.starts_with(&m.from) && m.path.len() != m.from.len() {
                    return run(doc, i, op); // fails: cannot move inside itself
                }
                // Measuring the value is the work of a move, and a move can be repeated
                // (there and back) without growing anything: the bytes measured are
                // charged, as copies are, so that one patch cannot spend minutes moving
                // one large value 1,000 times (an outside probe: 97 s for one request).
                let len = encoded_len(source);
                self.moved = self.moved.saturating_add(len);
                if self.moved > MAX_PATCH_MOVE_BYTES {
                    return Err(DocumentError::MoveBudget { operation: i });
                }
                self.check_depth(i, depth_at(&m.path, source))?;
                let removed = size_after_remove(doc, self.size, &m.from);
                let value = take(doc, &m.from).ok_or_else(|| failed(i, &m.from, FROM_INVALID))?;
                let size = size_after_insert(doc, removed, &m.path, len);
                self.check_size(i, size)?;
                insert(doc, &m.path, value).map_err(|()| failed(i, &m.path, PATH_INVALID))?;
                self.size = size;
                Ok(())
            }
        }
    }

    fn check_size(&self, i: usize, bytes: usize) -> Result<(), DocumentError> {
        if bytes > MAX_DOCUMENT_BYTES {
            return Err(DocumentError::TooLarge {
                operation: Some(i),
                bytes,
            });
        }
        Ok(())
    }

    fn check_depth(&self, i: usize, depth: usize) -> Result<(), DocumentError> {
        if depth > MAX_DOCUMENT_DEPTH {
            return Err(DocumentError::TooDeep {
                operation: Some(i),
                depth,
            });
        }
        Ok(())
    }
}

/// Runs one operation with json-patch (RFC 6902 semantics), naming it by its index.
fn run(doc: &mut Value, i: usize, op: &PatchOperation) -> Result<(), DocumentError> {
    json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|e| {
        DocumentError::Patch(format!(
            "operation '/{i}' failed at path '{}': {}",
            e.path, e.kind
        ))
    })
}

/// JSON equality as RFC 6902's `test` defines it: numbers by value, objects by their
/// members in any order, arrays element by element, strings and literals as they are.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// Numbers by value: integers exactly; an integer and a decimal only where the decimal is
/// that whole number exactly (9007199254740993 is not 9007199254740992.0).
fn same_number(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    let whole = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    let exact = |f: f64| {
        // Whole and within i128: the conversion is exact.
        (f.fract() == 0.0 && f.abs() < 1e38).then_some(f as i128)
    };
    match (whole(x), whole(y)) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) => y.as_f64().and_then(exact) == Some(a),
        (None, Some(b)) => x.as_f64().and_then(exact) == Some(b),
        (None, None) => x.as_f64() == y.as_f64(),
    }
}

const FROM_INVALID: &str = "\"from\" path is invalid";
const PATH_INVALID: &str = "path is invalid";

fn failed(i: usize, path: &Pointer, why: &str) -> DocumentError {
    DocumentError::Patch(format!("operation '/{i}' failed at path '{path}': {why}"))
}

/// Takes the value at `path` out of `doc` (the first half of `move`, as json-patch's
/// `remove`: `-` names no element).
fn take(doc: &mut Value, path: &Pointer) -> Option<Value> {
    let (parent, last) = path.split_back()?;
    match doc.pointer_mut(parent.as_str())? {
        Value::Object(map) => map.remove(last.decoded().as_ref()),
        Value::Array(arr) => {
            let n = last.to_index().ok()?.for_len(arr.len()).ok()?;
            Some(arr.remove(n))
        }
        _ => None,
    }
}

/// Puts `value` at `path` (json-patch's `add`, without cloning the value).
fn insert(doc: &mut Value, path: &Pointer, value: Value) -> Result<(), ()> {
    let Some((parent, last)) = path.split_back() else {
        *doc = value;
        return Ok(());
    };
    match doc.pointer_mut(parent.as_str()).ok_or(())? {
        Value::Object(map) => {
            map.insert(last.decoded().into_owned(), value);
            Ok(())
        }
        Value::Array(arr) => {
            let n = last
                .to_index()
                .map_err(|_| ())?
                .for_len_incl(arr.len())
                .map_err(|_| ())?;
            arr.insert(n, value);
            Ok(())
        }
        _ => Err(()),
    }
}

/// The size of `doc` (now `size` bytes) once a value of `len` bytes is added at `path`.
/// When the path cannot take a value the operation fails later; the size is unchanged.
fn size_after_insert(doc: &Value, size: usize, path: &Pointer, len: usize) -> usize {
    let Some((parent, last)) = path.split_back() else {
        return len; // the root is replaced
    };
    match doc.pointer(parent.as_str()) {
        Some(Value::Object(map)) => {
            let key = last.decoded();
            match map.get(key.as_ref()) {
                Some(old) => size - encoded_len(old) + len,
                // "key":value, with a comma when the object has members already.
                None => size + encoded_len(key.as_ref()) + 1 + len + usize::from(!map.is_empty()),
            }
        }
        Some(Value::Array(arr)) => size + len + usize::from(!arr.is_empty()),
        _ => size,
    }
}

/// The size of `doc` (now `size` bytes) once the value at `path` is removed.
fn size_after_remove(doc: &Value, size: usize, path: &Pointer) -> usize {
    let Some((parent, last)) = path.split_back() else {
        return size;
    };
    match doc.pointer(parent.as_str()) {
        Some(Value::Object(map)) => {
            let key = last.decoded();
            match map.get(key.as_ref()) {
                Some(old) => {
                    size - encoded_len(key.as_ref())
                        - 1
                        - encoded_len(old)
                        - usize::from(map.len() > 1)
                }
                None => size,
            }
        }
        Some(Value::Array(arr)) => {
            let index = last.to_index().ok().and_then(|i| match i {
                Index::Num(n) => Some(n),
                Index::Next => None,
            });
            match index.and_then(|n| arr.get(n)) {
                Some(old) => size - encoded_len(old) - usize::from(arr.len() > 1),
                None => size,
            }
        }
        _ => size,
    }
}

#[cfg(test)]
mod tests;
