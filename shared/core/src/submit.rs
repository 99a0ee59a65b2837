//! Submission of entries: the request shape, syntactic validation (all or nothing), limits,
//! transaction ids and the signed form of each entry.

use serde_json::{Map, Value};

use crate::entry::{ParseOptions, parse_entry};
use crate::ids::TransactionId;
use crate::jws::{Signer, decode_client_jws};
use crate::model::NewEntry;
use crate::time::Timestamp;
use crate::validate::{Errors, FieldError, codes};

pub const MAX_ENTRIES_PER_REQUEST: usize = 1_000;
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;
/// Errors listed in one 400 response; the count of the rest is given in the detail.
pub const MAX_REPORTED_ERRORS: usize = 100;

/// Why a submission is refused as a whole.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitError {
    /// 400: the body or some entries are invalid; nothing is stored.
    Invalid(Vec<FieldError>),
    /// 413: a limit is exceeded.
    TooLarge {
        detail: String,
        errors: Vec<FieldError>,
    },
}

/// A validated submission, ready for the log.
#[derive(Debug, Clone)]
pub struct Submission {
    pub entries: Vec<NewEntry>,
}

/// Signatures a request may make the service check for resubmitted entries it signed
/// itself (see [`prepare`]).
const MAX_RESUBMISSION_CHECKS: usize = 16;

/// Parses `{requestId?, entries: [...]}` or a bare array, validates every entry, and signs the
/// plain ones. `now` is the time of receipt.
pub fn prepare(body: &Value, signer: &Signer, now: Timestamp) -> Result<Submission, SubmitError> {
    let mut errors = Errors::default();
    let (list, base, request_id) = match body {
        Value::Array(list) => (list, String::new(), None),
        Value::Object(map) => {
            crate::validate::misspelt_members(map, &["requestId", "entries"], "", &mut errors);
            let request_id = match map.get("requestId") {
                None | Some(Value::Null) => None,
                // The plain id rule: `#` is kept for the ids derived from it.
                Some(Value::String(s)) => match crate::ids::check_id(s) {
                    Ok(()) if s.len() <= 100 => Some(s.as_str()),
                    _ => {
                        errors.push(
                            "/requestId",
                            codes::FORMAT,
                            "must be 1 to 100 characters from A-Z a-z 0-9 . _ : ~ -",
                        );
                        None
                    }
                },
                Some(_) => {
                    errors.push("/requestId", codes::TYPE, "must be a string");
                    None
                }
            };
            match map.get("entries") {
                Some(Value::Array(list)) => (list, "/entries".to_owned(), request_id),
                Some(_) => {
                    errors.push("/entries", codes::TYPE, "must be an array");
                    return Err(SubmitError::Invalid(errors.list));
                }
                None => {
                    errors.push("/entries", codes::REQUIRED, "is required");
                    return Err(SubmitError::Invalid(errors.list));
                }
            }
        }
        _ => {
            errors.push(
                "",
                codes::TYPE,
                "must be an object with `entries` or an array of entries",
            );
            return Err(SubmitError::Invalid(errors.list));
        }
    };
    if list.is_empty() {
        errors.push(base.clone(), codes::RANGE, "must hold at least one entry");
    }
    if list.len() > MAX_ENTRIES_PER_REQUEST {
        return Err(SubmitError::TooLarge {
            detail: format!(
                "{} entries in one request; at most {MAX_ENTRIES_PER_REQUEST}",
                list.len()
            ),
            errors: vec![],
        });
    }
    let opts = ParseOptions {
        now: Some(now),
        plain: true,
    };
    let mut too_large = Vec::new();
    let mut prepared = Vec::with_capacity(list.len());
    let mut verifications = 0;
    for (index, raw) in list.iter().enumerate() {
        let ptr = format!("{base}/{index}");
        // A client JWS is stored verbatim; its payload is the entry.
        let (payload, verbatim) = match raw {
            Value::String(jws) => {
                if jws.len() > MAX_ENTRY_BYTES {
                    too_large.push(entry_too_large(&ptr, jws.len()));
                    continue;
                }
                match decode_client_jws(jws) {
                    Ok(p) => (std::borrow::Cow::Owned(p), Some(jws.as_str())),
                    Err(e) => {
                        errors.push(ptr, codes::FORMAT, e.to_string());
                        continue;
                    }
                }
            }
            other => (std::borrow::Cow::Borrowed(other), None),
        };
        // The rules of plain entries hold for a client's JWS too, but not for one the
        // service signed (a client resubmitting its log): it was accepted before them, and
        // is read as it was. Verified only when a rule refused it, so an accepted entry
        // costs no verification, and at most a few times per request, so that a request
        // of refused entries naming our key id cannot make the service verify a thousand
        // signatures.
        let before = errors.len();
        let mut parsed = parse_entry(&payload, &ptr, opts, &mut errors);
        if parsed.is_none()
            && errors.len() > before
            && verifications < MAX_RESUBMISSION_CHECKS
            && verbatim.is_some_and(|jws| {
                verifications += 1;
                signer.verify_jws(jws)
            })
        {
            errors.list.truncate(before);
            let resubmitted = ParseOptions {
                plain: false,
                ..opts
            };
            parsed = parse_entry(&payload, &ptr, resubmitted, &mut errors);
        }
        let Some(entry) = parsed else {
            continue;
        };
        let transaction_id = entry
            .transaction_id
            .clone()
            .or_else(|| request_id.and_then(|r| TransactionId::parse(format!("{r}#{index}")).ok()));
        prepared.push(Prepared {
            index,
            payload,
            verbatim,
            transaction_id,
            own_id: entry.transaction_id.is_some(),
        });
    }
    if !too_large.is_empty() {
        return Err(SubmitError::TooLarge {
            detail: format!("an entry may hold at most {MAX_ENTRY_BYTES} bytes"),
            errors: too_large,
        });
    }
    derived_id_clashes(&prepared, &base, &mut errors);
    if !errors.is_empty() {
        return Err(SubmitError::Invalid(errors.list));
    }
    let mut entries = Vec::with_capacity(prepared.len());
    for Prepared {
        index,
        payload,
        verbatim,
        transaction_id,
        own_id,
    } in prepared
    {
        let jwt = match verbatim {
            Some(jws) => jws.to_owned(),
            None => {
                // Record the derived transaction id in the signed payload, so the stored
                // entry says how it was deduplicated.
                let bytes = match (&transaction_id, own_id, payload.as_ref()) {
                    (Some(t), false, Value::Object(map)) => {
                        let mut map: Map<String, Value> = map.clone();
                        map.insert("transactionId".into(), Value::String(t.to_string()));
                        serde_json::to_vec(&map)
                    }
                    _ => serde_json::to_vec(payload.as_ref()),
                }
                .unwrap_or_default();
                if bytes.len() > MAX_ENTRY_BYTES {
                    too_large.push(entry_too_large(&format!("{base}/{index}"), bytes.len()));
                    continue;
                }
                signer.sign_jws(&bytes)
            }
        };
        entries.push(NewEntry {
            transaction_id,
            received_at: now,
            jwt,
        });
    }
    if !too_large.is_empty() {
        return Err(SubmitError::TooLarge {
            detail: format!("an entry may hold at most {MAX_ENTRY_BYTES} bytes"),
            errors: too_large,
        });
    }
    Ok(Submission { entries })
}

/// A transaction id of the derived form (`{requestId}#{index}`, which an entry resubmitted
/// as the service signed it carries) may be the id the request's `requestId` gives another
/// of its entries: that entry would be taken for a duplicate and dropped. Each such id is
/// refused, at the entry that holds it.
fn derived_id_clashes(prepared: &[Prepared<'_>], base: &str, errors: &mut Errors) {
    let derived: std::collections::BTreeMap<&TransactionId, usize> = prepared
        .iter()
        .filter(|p| !p.own_id)
        .filter_map(|p| Some((p.transaction_id.as_ref()?, p.index)))
        .collect();
    if derived.is_empty() {
        return;
    }
    for p in prepared.iter().filter(|p| p.own_id) {
        let Some(other) = p.transaction_id.as_ref().and_then(|id| derived.get(id)) else {
            continue;
        };
        let ptr = match p.verbatim {
            Some(_) => format!("{base}/{}", p.index),
            None => format!("{base}/{}/transactionId", p.index),
        };
        let id = p.transaction_id.as_ref().map_or("", |t| t.as_str());
        errors.push(
            ptr,
            codes::CONFLICT,
            format!("{id} is the id requestId gives the entry at index {other} of this request"),
        );
    }
}

/// One valid entry of a submission, before it is signed.
struct Prepared<'a> {
    index: usize,
    payload: std::borrow::Cow<'a, Value>,
    /// The client's JWS, stored as it came.
    verbatim: Option<&'a str>,
    transaction_id: Option<TransactionId>,
    /// Whether the transaction id is the entry's own (else derived from `requestId`).
    own_id: bool,
}

fn entry_too_large(ptr: &str, size: usize) -> FieldError {
    FieldError {
        pointer: ptr.to_owned(),
        code: codes::TOO_LARGE.into(),
        message: format!("has {size} bytes; at most {MAX_ENTRY_BYTES}"),
    }
}
