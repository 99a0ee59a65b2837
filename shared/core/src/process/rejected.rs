//! `entries.rejected` events: the rejections of a processing run, split into events that
//! each stay small (a DynamoDB item holds at most 400 KB, and a commit writes its events
//! in one transaction of at most 4 MB), with the text of every error capped.
//!
//! Limits (docs/architecture.md, "Limits"):
//! - an event lists at most [`MAX_ERRORS_PER_EVENT`] errors, and its JSON (envelope
//!   included) is at most [`MAX_EVENT_BYTES`];
//! - each error's `message` is at most [`MAX_MESSAGE_BYTES`], its `pointer` at most
//!   [`MAX_POINTER_BYTES`], its `transactionId` at most [`MAX_TRANSACTION_ID_BYTES`] and its
//!   `type` at most [`MAX_TYPE_BYTES`]; longer text is cut on a character boundary and
//!   ends with [`ELLIPSIS`];
//! - the events of one commit hold at most about [`MAX_BYTES_PER_COMMIT`] (the processor
//!   commits earlier when the rejections reach it).
//!
//! Event ids derive from the instance and the first and last sequence of the event's
//! errors, so a replay of the same run yields the same events (and the store skips them).

use std::borrow::Cow;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::RejectedEntry;
use crate::document::encoded_len;
use crate::ids::InstanceKey;
use crate::model::Event;
use crate::time::Timestamp;

/// Errors listed in one `entries.rejected` event at most.
pub const MAX_ERRORS_PER_EVENT: usize = 100;
/// Bytes of one `entries.rejected` event's JSON at most, envelope included (the stored
/// event item adds its keys: well under DynamoDB's 400 KB).
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
/// Bytes of the rejection events of one commit, at most about (one error more at worst):
/// the processor commits when its pending rejections reach it.
pub const MAX_BYTES_PER_COMMIT: usize = 1024 * 1024;
/// Bytes of an error's `message` at most.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Bytes of an error's `pointer` at most.
pub const MAX_POINTER_BYTES: usize = 256;
/// Bytes of an error's `transactionId` echo at most (valid ids have at most 128).
pub const MAX_TRANSACTION_ID_BYTES: usize = 128;
/// Bytes of an error's `type` at most.
pub const MAX_TYPE_BYTES: usize = 64;
/// Ends a cut text.
pub const ELLIPSIS: char = '…';

/// `s` if it has at most `max` bytes; otherwise its longest prefix ending on a character
/// boundary that leaves room for [`ELLIPSIS`], followed by it (at most `max` bytes).
pub fn capped(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut end = max.saturating_sub(ELLIPSIS.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + ELLIPSIS.len_utf8());
    out.push_str(&s[..end]);
    out.push(ELLIPSIS);
    Cow::Owned(out)
}

/// One error of an `entries.rejected` event, its text capped.
pub fn error_of(r: &RejectedEntry) -> Value {
    json!({
        "sequence": r.sequence,
        "transactionId": r.transaction_id.as_deref().map(|t| capped(t, MAX_TRANSACTION_ID_BYTES)),
        "type": capped(&r.entry_type, MAX_TYPE_BYTES),
        "code": capped(&r.rejection.code, MAX_TYPE_BYTES),
        "message": capped(&r.rejection.message, MAX_MESSAGE_BYTES),
        "pointer": capped(&r.rejection.pointer, MAX_POINTER_BYTES),
    })
}

/// The `entries.rejected` event of `errors` (built by [`error_of`]; `first` and `last` are
/// the sequences of the first and last of them), without any splitting.
fn event_of(key: &InstanceKey, first: u64, last: u64, errors: Vec<Value>, now: Timestamp) -> Event {
    let mut hash = Sha256::new();
    hash.update(format!("entries.rejected\n{key}\n{first}\n{last}"));
    let digest = hash.finalize();
    let id: String = digest[..13].iter().map(|b| format!("{b:02x}")).collect();
    Event {
        id: format!("evt_{id}"),
        event_type: "entries.rejected".into(),
        project_id: key.project_id.clone(),
        instance_id: key.instance_id.clone(),
        created_at: now,
        data: json!({ "errors": errors }),
    }
}

/// The errors of one event under construction.
#[derive(Debug, Default)]
struct Batch {
    first: u64,
    last: u64,
    errors: Vec<Value>,
    /// JSON bytes of the errors with the commas between them.
    bytes: usize,
}

/// The rejections of a run, grouped into events as they come: an error joins the open
/// event unless that would break [`MAX_ERRORS_PER_EVENT`] or [`MAX_EVENT_BYTES`], in which
/// case a new event starts. Order is kept within and across events.
#[derive(Debug)]
pub struct RejectedEvents {
    key: InstanceKey,
    now: Timestamp,
    /// Bytes of an event with no errors (`"errors":[]`).
    envelope: usize,
    batches: Vec<Batch>,
    bytes: usize,
}

impl RejectedEvents {
    pub fn new(key: &InstanceKey, now: Timestamp) -> Self {
        RejectedEvents {
            key: key.clone(),
            now,
            envelope: encoded_len(&event_of(key, 0, 0, Vec::new(), now)),
            batches: Vec::new(),
            bytes: 0,
        }
    }

    pub fn push(&mut self, r: &RejectedEntry) {
        let error = error_of(r);
        let len = encoded_len(&error);
        let fits = self.batches.last().is_some_and(|b| {
            b.errors.len() < MAX_ERRORS_PER_EVENT
                && self.envelope + b.bytes + 1 + len <= MAX_EVENT_BYTES
        });
        if fits && let Some(b) = self.batches.last_mut() {
            b.bytes += 1 + len;
            b.last = r.sequence;
            b.errors.push(error);
        } else {
            // A lone error always fits: its text is capped far below the limit.
            self.batches.push(Batch {
                first: r.sequence,
                last: r.sequence,
                errors: vec![error],
                bytes: len,
            });
        }
        self.bytes += len + 1;
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Events the pending rejections make.
    pub fn event_count(&self) -> usize {
        self.batches.len()
    }

    /// About the bytes of the pending events (errors only).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The events of the pending rejections, in order; none pending afterwards.
    pub fn take(&mut self) -> Vec<Event> {
        self.bytes = 0;
        std::mem::take(&mut self.batches)
            .into_iter()
            .map(|b| event_of(&self.key, b.first, b.last, b.errors, self.now))
            .collect()
    }
}

/// The `entries.rejected` events of a run of rejections (see [`RejectedEvents`]).
pub fn rejected_events(
    key: &InstanceKey,
    rejected: &[RejectedEntry],
    now: Timestamp,
) -> Vec<Event> {
    let mut events = RejectedEvents::new(key, now);
    for r in rejected {
        events.push(r);
    }
    events.take()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{InstanceId, ProjectId};
    use crate::state::Rejection;

    fn key() -> InstanceKey {
        InstanceKey::new(
            crate::ids::TenantId::from_claim("tenant").expect("tenant"),
            ProjectId::parse("p".repeat(128)).expect("project id"),
            InstanceId::parse("i".repeat(128)).expect("instance id"),
        )
    }

    fn rejected(sequence: u64, message: String, pointer: String) -> RejectedEntry {
        RejectedEntry {
            sequence,
            transaction_id: Some(format!("{:0>128}", sequence)),
            entry_type: "instanceMetadata".into(),
            rejection: Rejection {
                code: "patchFailed".into(),
                message,
                pointer,
            },
        }
    }

    #[test]
    fn capped_text_ends_on_a_char_boundary_with_an_ellipsis() {
        assert_eq!(capped("short", 10), "short");
        assert_eq!(capped("exactly10!", 10), "exactly10!");
        let cut = capped("abcdefghijk", 10);
        assert_eq!(cut, "abcdefg…");
        assert!(cut.len() <= 10);
        // Multi-byte characters are never split.
        let s = "ééééé"; // 10 bytes
        let cut = capped(s, 8);
        assert_eq!(cut, "éé…");
        assert!(cut.len() <= 8);
        for max in 0..12 {
            assert!(capped("€€€€", max).len() <= max.max(ELLIPSIS.len_utf8()));
        }
    }

    #[test]
    fn each_error_text_is_capped() {
        let r = rejected(7, "m".repeat(10_000), "/p".repeat(5_000));
        let e = error_of(&r);
        let message = e["message"].as_str().expect("message");
        assert!(message.len() <= MAX_MESSAGE_BYTES && message.ends_with(ELLIPSIS));
        let pointer = e["pointer"].as_str().expect("pointer");
        assert!(pointer.len() <= MAX_POINTER_BYTES && pointer.ends_with(ELLIPSIS));
        assert_eq!(
            e["transactionId"].as_str().map(str::len),
            Some(128),
            "kept whole"
        );
        assert_eq!(e["sequence"], 7);
    }

    /// The regression of issue 9, item 3: 1,000 rejections with 128-character transaction
    /// ids and long messages made one event of over 1 MB, which DynamoDB refuses (400 KB
    /// per item), after which the instance never committed again.
    #[test]
    fn a_thousand_long_rejections_split_into_bounded_events_in_order() {
        let key = key();
        let now = Timestamp::now();
        let all: Vec<RejectedEntry> = (1..=1000)
            .map(|n| {
                let path = format!("/{}", "segment/".repeat(250));
                rejected(
                    n,
                    format!("operation '/0' failed at path '{path}': value did not match ({n})"),
                    format!("/data/patch/0/path{path}"),
                )
            })
            .collect();
        let events = rejected_events(&key, &all, now);
        assert!(events.len() > 10, "several events: {}", events.len());
        let mut sequences = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for e in &events {
            let bytes = serde_json::to_vec(e).expect("encode").len();
            assert!(bytes <= MAX_EVENT_BYTES, "an event of {bytes} bytes");
            let errors = e.data["errors"].as_array().expect("errors");
            assert!(!errors.is_empty() && errors.len() <= MAX_ERRORS_PER_EVENT);
            assert_eq!(e.event_type, "entries.rejected");
            assert!(ids.insert(e.id.clone()), "event ids are distinct");
            for err in errors {
                sequences.push(err["sequence"].as_u64().expect("sequence"));
                assert_eq!(err["transactionId"].as_str().map(str::len), Some(128));
                let message = err["message"].as_str().expect("message");
                assert!(message.len() <= MAX_MESSAGE_BYTES);
            }
        }
        assert_eq!(
            sequences,
            (1..=1000).collect::<Vec<_>>(),
            "none lost, order kept"
        );
        // A replay of the same rejections yields the same events.
        assert_eq!(rejected_events(&key, &all, now), events);
    }

    #[test]
    fn short_rejections_split_by_count() {
        let key = key();
        let all: Vec<RejectedEntry> = (1..=250)
            .map(|n| rejected(n, "unknown item".into(), "/data/itemId".into()))
            .collect();
        let events = rejected_events(&key, &all, Timestamp::now());
        let sizes: Vec<usize> = events
            .iter()
            .map(|e| e.data["errors"].as_array().map_or(0, Vec::len))
            .collect();
        assert_eq!(sizes, vec![100, 100, 50]);
    }

    #[test]
    fn a_few_rejections_keep_their_single_event_and_id() {
        let key = key();
        let now = Timestamp::now();
        let all = vec![
            rejected(3, "a".into(), String::new()),
            rejected(9, "b".into(), String::new()),
        ];
        let events = rejected_events(&key, &all, now);
        assert_eq!(events.len(), 1);
        // The id formula is the one stored events were made with (same range: same id).
        let mut hash = Sha256::new();
        hash.update(format!("entries.rejected\n{key}\n3\n9"));
        let digest = hash.finalize();
        let id: String = digest[..13].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(events[0].id, format!("evt_{id}"));
    }
}
