//! An instance's events as the API reads them (`GET .../instances/{instanceId}/events`):
//! the stored events in creation order ([`EventStore::list_events`]), filtered by type and
//! creation time, in pages bounded by count, by bytes and by the events examined, so that
//! no request reads without bound however many events an instance holds. A lost webhook
//! (an `entries.rejected` above all) stays readable here.
//!
//! The cursor is an event id: the last one a page examined, or any event id the client
//! already has (the webhook envelope's `id`), so a client resumes after the last event it
//! saw. A filtered page may be short, or even empty, while `next` is set: the listing ends
//! only when `next` is null.

use crate::ids::InstanceKey;
use crate::model::Event;
use crate::ports::{EventStore, StoreResult};
use crate::time::Timestamp;

/// Events read from the store per round.
const ROUND: usize = 100;

/// The most events one page examines (matching or not); past it the page ends with a
/// `next` cursor. Bounds the work of a filtered read over an instance with many events of
/// other types (its price updates above all).
pub const MAX_EVENTS_EXAMINED: usize = 1_000;

/// What to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events of these types (`entries.rejected`, ...); every type when empty.
    pub types: Vec<String>,
    /// Only events created at or after this time.
    pub since: Option<Timestamp>,
    /// Only events created before this time.
    pub until: Option<Timestamp>,
    /// Start after this event id (none: from the instance's first event).
    pub after: Option<String>,
    /// At most this many events.
    pub limit: usize,
    /// At most this many JSON bytes of events (the first event always fits).
    pub max_bytes: usize,
}

impl EventQuery {
    /// Whether `event` passes the type and time filters.
    pub fn matches(&self, event: &Event) -> bool {
        (self.types.is_empty() || self.types.contains(&event.event_type))
            && self.since.is_none_or(|s| event.created_at >= s)
            && self.until.is_none_or(|u| event.created_at < u)
    }
}

/// A page of events and where the next one starts.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    pub items: Vec<Event>,
    /// The id of the last event this page examined, while there may be more; `None` when
    /// the instance's events were read to the end.
    pub next: Option<String>,
}

/// Reads one page of `key`'s events. An unknown `after` id is `NotFound`.
pub async fn read_events<S: EventStore>(
    store: &S,
    key: &InstanceKey,
    query: &EventQuery,
) -> StoreResult<EventPage> {
    let limit = query.limit.max(1);
    let mut items: Vec<Event> = Vec::new();
    let mut bytes = 0usize;
    let mut examined = 0usize;
    let mut cursor = query.after.clone();
    loop {
        let want = ROUND.min(MAX_EVENTS_EXAMINED - examined);
        let round = store.list_events(key, cursor.as_deref(), want).await?;
        let exhausted = round.len() < want;
        for event in round {
            if query.matches(&event) {
                let size = serde_json::to_vec(&event).map_or(usize::MAX, |b| b.len());
                if !items.is_empty() && bytes + 1 + size > query.max_bytes {
                    // Does not fit: the next page starts with it.
                    return Ok(EventPage {
                        items,
                        next: cursor,
                    });
                }
                bytes += size + usize::from(!items.is_empty());
                cursor = Some(event.id.clone());
                items.push(event);
                examined += 1;
                if items.len() == limit {
                    return Ok(EventPage {
                        items,
                        next: cursor,
                    });
                }
            } else {
                cursor = Some(event.id.clone());
                examined += 1;
            }
        }
        if exhausted {
            return Ok(EventPage { items, next: None });
        }
        if examined >= MAX_EVENTS_EXAMINED {
            return Ok(EventPage {
                items,
                next: cursor,
            });
        }
    }
}
