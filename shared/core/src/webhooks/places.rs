//! Places for attempts in flight per destination (a callback URL's origin), so that a
//! receiver that hangs cannot keep every place of a delivery pool: each of its attempts
//! holds a place for the whole 15 s timeout, and the deliveries of every other subscriber,
//! of every tenant, waited behind them (an outside probe measured 15 s to 12 minutes).
//!
//! A destination is limited only while it is slow: an attempt to it has been in flight for
//! [`SLOW`] or more, or one ended after that long within the last [`SLOW_REMEMBERED`].
//! Then it holds at most its share of the pool, and so do all the slow destinations of one
//! tenant together (a tenant with hung receivers on four ports or subdomains would
//! otherwise take four shares). An attempt that finds its share taken is not made: the delivery is asked again a little later ([`deferral`]), and the attempt
//! does not count. A destination that answers in time is never limited, so one busy
//! receiver with a long backlog keeps the whole pool (nothing is deferred and asked again).
//! What stays: when a receiver starts to hang, the attempts already in flight to it keep
//! their places until they time out (at most 15 s), once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// An attempt in flight this long makes its destination slow (the whole attempt may take
/// 15 s; an answer takes milliseconds to a second or two).
pub const SLOW: Duration = Duration::from_secs(5);
/// How long a destination stays slow after an attempt to it ended that slowly.
pub const SLOW_REMEMBERED: Duration = Duration::from_secs(10 * 60);
/// Destinations remembered before those neither in flight nor slow any more are dropped.
const PRUNE_ABOVE: usize = 1_024;

/// The places of each destination (in memory: a process's own pool).
#[derive(Debug)]
pub struct DestinationPlaces {
    per_slow_destination: usize,
    /// [`SLOW`], but for tests.
    slow_after: Duration,
    destinations: Mutex<Destinations>,
}

#[derive(Debug, Default)]
struct Destinations {
    next_id: u64,
    by_origin: HashMap<String, Destination>,
}

#[derive(Debug, Default)]
struct Destination {
    /// The attempts in flight: an id, the tenant, and when each started.
    started: Vec<(u64, String, Instant)>,
    /// Slow until then, from an attempt that ended slowly.
    slow_until: Option<Instant>,
}

impl Destination {
    fn slow(&self, now: Instant, slow_after: Duration) -> bool {
        self.slow_until.is_some_and(|t| t > now)
            || self
                .started
                .iter()
                .any(|(_, _, at)| now.saturating_duration_since(*at) >= slow_after)
    }
}

impl DestinationPlaces {
    /// A slow destination has at most `per_slow_destination` attempts in flight (at
    /// least 1).
    pub fn new(per_slow_destination: usize) -> Arc<Self> {
        Self::slow_after(per_slow_destination, SLOW)
    }

    /// [`DestinationPlaces::new`] with another threshold than [`SLOW`] (tests: zero makes
    /// every attempt in flight slow).
    pub fn slow_after(per_slow_destination: usize, slow_after: Duration) -> Arc<Self> {
        Arc::new(Self {
            per_slow_destination: per_slow_destination.max(1),
            slow_after,
            destinations: Mutex::new(Destinations::default()),
        })
    }

    /// A place for an attempt of `tenant` to `destination` starting now, or `None` when
    /// the destination is slow and holds its share of places, or the tenant's slow
    /// destinations hold theirs.
    pub fn take(self: &Arc<Self>, destination: &str, tenant: &str) -> Option<Place> {
        self.take_at(destination, tenant, Instant::now())
    }

    fn take_at(self: &Arc<Self>, destination: &str, tenant: &str, now: Instant) -> Option<Place> {
        let mut all = self.lock();
        if all.by_origin.len() > PRUNE_ABOVE {
            all.by_origin
                .retain(|_, d| !d.started.is_empty() || d.slow_until.is_some_and(|t| t > now));
        }
        let slow = |d: &Destination| d.slow(now, self.slow_after);
        if all.by_origin.get(destination).is_some_and(&slow) {
            let full = all.by_origin[destination].started.len() >= self.per_slow_destination;
            let tenants: usize = all
                .by_origin
                .values()
                .filter(|d| slow(d))
                .map(|d| d.started.iter().filter(|(_, t, _)| t == tenant).count())
                .sum();
            if full || tenants >= self.per_slow_destination {
                return None;
            }
        }
        let id = all.next_id;
        all.next_id += 1;
        all.by_origin
            .entry(destination.to_owned())
            .or_default()
            .started
            .push((id, tenant.to_owned(), now));
        Some(Place(Some(Taken {
            places: self.clone(),
            destination: destination.to_owned(),
            id,
        })))
    }

    /// Attempts in flight to `destination`.
    pub fn in_flight(&self, destination: &str) -> usize {
        self.lock()
            .by_origin
            .get(destination)
            .map_or(0, |d| d.started.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Destinations> {
        self.destinations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn release(&self, destination: &str, id: u64, now: Instant) {
        let mut all = self.lock();
        let Some(d) = all.by_origin.get_mut(destination) else {
            return;
        };
        if let Some(i) = d.started.iter().position(|(taken, _, _)| *taken == id) {
            let (_, _, at) = d.started.swap_remove(i);
            if now.saturating_duration_since(at) >= self.slow_after {
                d.slow_until = Some(now + SLOW_REMEMBERED);
            }
        }
        if d.started.is_empty() && d.slow_until.is_none_or(|t| t <= now) {
            all.by_origin.remove(destination);
        }
    }
}

#[derive(Debug)]
struct Taken {
    places: Arc<DestinationPlaces>,
    destination: String,
    id: u64,
}

/// A place taken for one attempt; dropping it (the attempt is over) frees the place.
#[derive(Debug, Default)]
pub struct Place(Option<Taken>);

impl Place {
    /// A place that limits nothing (a transport without places).
    pub fn unlimited() -> Self {
        Self(None)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.places.release(&t.destination, t.id, Instant::now());
        }
    }
}

/// How long a delivery whose destination had no place waits before it is asked again: 20
/// to 40 s, spread by the webhook id so that a destination's backlog does not come back
/// all at once. Long enough that a backlog behind a hung receiver costs the queue little,
/// short against the retry schedule.
pub fn deferral(webhook_id: &str) -> Duration {
    let digest = Sha256::digest(format!("deferral\n{webhook_id}"));
    let unit = f64::from(u16::from_be_bytes([digest[0], digest[1]])) / f64::from(u16::MAX);
    Duration::from_secs(20).mul_f64(1.0 + unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "https://a.example";

    #[test]
    fn a_destination_that_answers_in_time_is_never_limited() {
        let places = DestinationPlaces::new(2);
        let t0 = Instant::now();
        let held: Vec<Place> = (0..10)
            .filter_map(|_| places.take_at(A, "t1", t0))
            .collect();
        assert_eq!(held.len(), 10);
        assert_eq!(places.in_flight(A), 10);
        drop(held);
        assert_eq!(places.in_flight(A), 0);
        assert!(places.take_at(A, "t1", t0 + SLOW * 100).is_some());
    }

    #[test]
    fn a_slow_destination_holds_its_share_and_stays_slow_for_a_while() {
        let places = DestinationPlaces::new(2);
        let t0 = Instant::now();
        let first = places.take_at(A, "t1", t0).unwrap();
        let _second = places.take_at(A, "t1", t0).unwrap();
        let _third = places.take_at(A, "t1", t0).unwrap();
        // Once an attempt has been in flight for SLOW, no more than the share.
        let later = t0 + SLOW;
        assert!(places.take_at(A, "t1", later).is_none(), "slow and full");
        assert!(
            places.take_at("https://b.example", "t2", later).is_some(),
            "another destination has its own places"
        );
        // Attempts that ended slowly keep it slow; under its share it takes attempts.
        drop(first);
        drop(_second);
        assert_eq!(places.in_flight(A), 1);
        let fourth = places.take_at(A, "t1", later).expect("under its share");
        assert!(places.take_at(A, "t1", later).is_none());
        drop(fourth);
        drop(_third);
        assert!(
            places
                .take_at(A, "t1", later + SLOW_REMEMBERED * 2)
                .is_some()
        );
        assert!(
            DestinationPlaces::new(0).take("x", "t1").is_some(),
            "at least one"
        );
    }

    #[test]
    fn a_tenants_slow_destinations_share_one_share() {
        let places = DestinationPlaces::new(2);
        let t0 = Instant::now();
        let later = t0 + SLOW;
        let _a = places.take_at(A, "t1", t0).unwrap();
        let _b = places.take_at("https://b.example", "t1", t0).unwrap();
        // Both slow now: the tenant holds its share across them, on any slow destination.
        assert!(places.take_at(A, "t1", later).is_none());
        assert!(places.take_at("https://b.example", "t1", later).is_none());
        // Another tenant's attempt to a slow destination takes the place left there.
        assert!(places.take_at(A, "t2", later).is_some());
        // A destination that is not slow is not limited.
        assert!(places.take_at("https://c.example", "t1", later).is_some());
    }

    #[test]
    fn an_attempt_that_ended_slowly_keeps_its_destination_slow() {
        let places = DestinationPlaces::new(2);
        let t0 = Instant::now();
        let place = places.take_at(A, "t1", t0).unwrap();
        let id = place.0.as_ref().unwrap().id;
        std::mem::forget(place);
        places.release(A, id, t0 + SLOW);
        let ended = t0 + SLOW;
        let _one = places.take_at(A, "t1", ended).unwrap();
        let _two = places.take_at(A, "t1", ended).unwrap();
        assert!(
            places.take_at(A, "t1", ended).is_none(),
            "fresh attempts, but remembered slow"
        );
    }

    #[test]
    fn deferrals_are_spread_between_20_and_40_seconds() {
        let all: Vec<Duration> = (0..50).map(|i| deferral(&format!("wh_{i}"))).collect();
        assert!(
            all.iter().all(|d| (20..=40).contains(&d.as_secs())),
            "{all:?}"
        );
        assert_eq!(deferral("wh_1"), deferral("wh_1"));
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert!(distinct.len() > 40);
    }
}
