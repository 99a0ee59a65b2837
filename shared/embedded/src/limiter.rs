//! RateLimit in memory: a token bucket per tenant. The standalone is one process, so its
//! limiter needs no shared state; time comes from the caller (`now`), so the buckets are
//! deterministic under test.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use pricing_core::ids::TenantId;
use pricing_core::ports::{Admission, RateLimit, StoreResult};
use pricing_core::time::Timestamp;

/// Buckets are pruned (full ones dropped: they hold nothing a new bucket would not) when
/// this many tenants have one.
const PRUNE_AT: usize = 10_000;

/// A token bucket per tenant: `rate_per_sec` tokens a second, at most `burst` saved; a
/// request takes one token.
pub struct TokenBuckets {
    rate_per_sec: f64,
    burst: f64,
    /// Tokens and the time (ms) they were counted at.
    buckets: Mutex<HashMap<TenantId, (f64, i64)>>,
}

impl TokenBuckets {
    pub fn new(rate_per_sec: f64, burst: f64) -> Self {
        TokenBuckets {
            rate_per_sec: rate_per_sec.max(f64::MIN_POSITIVE),
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token of `tenant` at `now_ms`; how long until one is available if none is.
    pub fn take(&self, tenant: &TenantId, now_ms: i64) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= PRUNE_AT && !buckets.contains_key(tenant) {
            let (rate, burst) = (self.rate_per_sec, self.burst);
            buckets.retain(|_, (tokens, at)| {
                *tokens + (now_ms - *at).max(0) as f64 / 1000.0 * rate < burst
            });
        }
        let (tokens, at) = buckets
            .entry(tenant.clone())
            .or_insert((self.burst, now_ms));
        // A clock that steps back refills nothing, and refilling goes on from the new time
        // (kept at the later time, a bucket would refill nothing until the clock caught
        // up again: hours of 429s after a correction of hours).
        let elapsed = (now_ms - *at).max(0) as f64 / 1000.0;
        *tokens = (*tokens + elapsed * self.rate_per_sec).min(self.burst);
        *at = now_ms;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            // At most an hour: whatever the rate, the wait is a Duration (a rate near 0
            // made one that does not fit, and the request panicked).
            let wait = ((1.0 - *tokens) / self.rate_per_sec).min(3600.0);
            Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::from_secs(3600)))
        }
    }
}

impl RateLimit for TokenBuckets {
    async fn admit(&self, tenant: &TenantId, now: Timestamp) -> StoreResult<Admission> {
        Ok(match self.take(tenant, now.millis()) {
            Ok(()) => Admission::Admitted,
            Err(retry_after) => Admission::Limited { retry_after },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_with_time() {
        let limiter = TokenBuckets::new(1000.0, 2.0);
        let t = TenantId::from_claim("t").expect("tenant");
        assert!(limiter.take(&t, 0).is_ok());
        assert!(limiter.take(&t, 0).is_ok());
        let wait = limiter.take(&t, 0).expect_err("the bucket is empty");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(1),
            "{wait:?}"
        );
        // 5 ms refill 5 tokens, capped at the burst of 2.
        assert!(limiter.take(&t, 5).is_ok());
        // A step back in time refills nothing: one token is left.
        assert!(limiter.take(&t, 1).is_ok());
        assert!(limiter.take(&t, 1).is_err());
        // Refilling goes on from the earlier time: 1 ms later there is a token again (kept
        // at the later time, 5, nothing would refill until 6).
        assert!(limiter.take(&t, 2).is_ok());
        // Another tenant has its own bucket.
        let u = TenantId::from_claim("u").expect("tenant");
        assert!(limiter.take(&u, 1).is_ok());
    }

    #[test]
    fn a_rate_near_zero_waits_at_most_an_hour() {
        // It made a wait no Duration holds, and the request panicked.
        for rate in [1e-300, 0.0, -1.0, f64::NAN] {
            let limiter = TokenBuckets::new(rate, 1.0);
            let t = TenantId::from_claim("t").expect("tenant");
            assert!(limiter.take(&t, 0).is_ok());
            let wait = limiter.take(&t, 0).expect_err("the bucket is empty");
            assert_eq!(wait, Duration::from_secs(3600), "{rate}");
        }
    }
}
