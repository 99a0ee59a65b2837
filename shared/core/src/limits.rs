//! Per-tenant limits (docs/limits.md): quotas on what a tenant may create, and the
//! configuration of the per-tenant request rate limit (port: [`crate::ports::RateLimit`]).
//! The defaults here are the documented ones; deployments override them (standalone: CLI
//! flags, AWS: template parameters passed as environment variables).

use std::time::Duration;

use crate::webhooks::MAX_SUBSCRIPTIONS_PER_SCOPE;

/// Default: projects one tenant may create.
pub const DEFAULT_PROJECTS_PER_TENANT: u64 = 1_000;
/// Default: instances one project may hold (counted per project: projects belong to one
/// tenant, so a tenant holds at most projects x instances).
pub const DEFAULT_INSTANCES_PER_PROJECT: u64 = 10_000;

/// How many projects, instances and subscriptions a tenant may create. A create past a
/// quota is refused (422 `quotaExceeded`) and writes nothing. Projects and instances are
/// never deleted, so their quotas are for the life of the tenant or project; a deleted
/// subscription frees its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub projects_per_tenant: u64,
    pub instances_per_project: u64,
    /// Per scope: a project's project-level subscriptions, or one instance's.
    pub subscriptions_per_scope: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            projects_per_tenant: DEFAULT_PROJECTS_PER_TENANT,
            instances_per_project: DEFAULT_INSTANCES_PER_PROJECT,
            subscriptions_per_scope: MAX_SUBSCRIPTIONS_PER_SCOPE as u64,
        }
    }
}

/// A fixed-window request limit: at most `limit` requests of one tenant per `window`
/// (windows aligned to the Unix epoch). The AWS adapter counts in DynamoDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateWindow {
    pub limit: u64,
    pub window: Duration,
}

/// Default on AWS: 200 requests per tenant per second (a fifth of the stage's default
/// throttle of 1,000/s, so one tenant flooding leaves the rest to the others).
pub const DEFAULT_RATE_WINDOW: RateWindow = RateWindow {
    limit: 200,
    window: Duration::from_secs(1),
};

impl RateWindow {
    /// The window holding `now_ms` (milliseconds since the epoch): its index and the
    /// milliseconds left until it ends (at least 1).
    pub fn locate(&self, now_ms: i64) -> (u64, u64) {
        let width = u64::try_from(self.window.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let now = u64::try_from(now_ms).unwrap_or(0);
        let index = now / width;
        let left = width - now % width;
        (index, left)
    }
}

/// Whole seconds for a `Retry-After` header: rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_and_end_in_the_future() {
        let w = RateWindow {
            limit: 1,
            window: Duration::from_secs(10),
        };
        assert_eq!(w.locate(0), (0, 10_000));
        assert_eq!(w.locate(9_999), (0, 1));
        assert_eq!(w.locate(10_000), (1, 10_000));
        assert_eq!(w.locate(25_500), (2, 4_500));
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    }
}
