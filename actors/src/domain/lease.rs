//! Lease arithmetic and the per-org expiry queue.
//!
//! A lease never shortens: renewal takes the later of the current expiry and
//! `now + lease_seconds`. The queue orders leases by expiry so the actor arms
//! one timer for the earliest, not one per task.
//!
//! A lease that runs out counts as an attempt: a task whose leases keep
//! running out (a poison task that crashes every agent) is failed once it
//! has used its `max_attempts`, instead of circling forever. A lease whose
//! holder the org's own write limit was refusing ran out for the limit,
//! not for the work, and does not count ([`expiry_counts`]).

use std::collections::BTreeSet;

use super::{Lease, TaskId};

/// A new lease. Its id is a version 4 UUID from the thread's CSPRNG
/// (`rand::thread_rng`, seeded from the OS), as key secrets are:
/// `Uuid::new_v4` without uuid's `fast-rng` feature asks the OS for every
/// id, a system call on every claim.
pub fn grant(now_ms: i64, seconds: u32) -> Lease {
    Lease {
        lease_id: uuid::Builder::from_random_bytes(rand::random()).into_uuid(),
        expires_at: now_ms + i64::from(seconds) * 1000,
        seconds,
    }
}

pub fn renew(lease: Lease, now_ms: i64) -> Lease {
    Lease {
        expires_at: lease
            .expires_at
            .max(now_ms + i64::from(lease.seconds) * 1000),
        ..lease
    }
}

/// Attempts a task gets when its create does not say.
pub const DEFAULT_MAX_ATTEMPTS: u8 = 5;
/// The most attempts a create may ask for.
pub const MAX_MAX_ATTEMPTS: u8 = 100;

/// What becomes of a task whose lease ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Back to `pending`, with this many attempts used.
    Requeue { attempts: u8 },
    /// Out of attempts: `failed`.
    Exhausted { attempts: u8 },
}

/// Whether the expiry of `lease` counts against its task's attempts, given
/// when an update of that lease by its holder was last refused by the
/// org's per-minute write limit: not when that refusal came within the
/// lease's last period (`seconds` before it ran out). Its holder was
/// alive and trying; the org's limit kept its renewal from landing.
pub fn expiry_counts(lease: &Lease, last_refused_at: Option<i64>) -> bool {
    last_refused_at.is_none_or(|at| lease.expires_at - at > i64::from(lease.seconds) * 1000)
}

/// What becomes of a task whose lease ran out: one more attempt used when
/// the expiry `counts` (see [`expiry_counts`]), back to `pending` otherwise.
pub fn expire(attempts: u8, max_attempts: u8, counts: bool) -> Expiry {
    if !counts {
        return Expiry::Requeue { attempts };
    }
    let attempts = attempts.saturating_add(1);
    if attempts >= max_attempts.max(1) {
        Expiry::Exhausted { attempts }
    } else {
        Expiry::Requeue { attempts }
    }
}

#[derive(Debug, Default)]
pub struct LeaseQueue {
    by_expiry: BTreeSet<(i64, TaskId)>,
}

impl LeaseQueue {
    pub fn insert(&mut self, expires_at: i64, task: TaskId) {
        self.by_expiry.insert((expires_at, task));
    }

    pub fn remove(&mut self, expires_at: i64, task: TaskId) {
        self.by_expiry.remove(&(expires_at, task));
    }

    /// The earliest expiry, to arm the timer for.
    pub fn next_deadline(&self) -> Option<i64> {
        self.by_expiry.first().map(|(at, _)| *at)
    }

    /// Removes and returns every task whose lease ran out at or before `now_ms`.
    pub fn pop_expired(&mut self, now_ms: i64) -> Vec<TaskId> {
        let mut out = Vec::new();
        while let Some(&(at, task)) = self.by_expiry.first() {
            if at > now_ms {
                break;
            }
            self.by_expiry.pop_first();
            out.push(task);
        }
        out
    }

    /// Every expiry, earliest first.
    pub fn expiries(&self) -> impl Iterator<Item = i64> + '_ {
        self.by_expiry.iter().map(|(at, _)| *at)
    }

    pub fn len(&self) -> usize {
        self.by_expiry.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_expiry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_are_random_version_4_uuids() {
        let ids: std::collections::HashSet<uuid::Uuid> =
            (0..1000).map(|_| grant(0, 60).lease_id).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.get_version(), Some(uuid::Version::Random));
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        }
    }

    #[test]
    fn the_last_attempt_fails_the_task() {
        assert_eq!(expire(0, 5, true), Expiry::Requeue { attempts: 1 });
        assert_eq!(expire(3, 5, true), Expiry::Requeue { attempts: 4 });
        assert_eq!(expire(4, 5, true), Expiry::Exhausted { attempts: 5 });
        assert_eq!(expire(0, 1, true), Expiry::Exhausted { attempts: 1 });
        // A count past the limit (the limit lowered by hand) still fails,
        // and never wraps around.
        assert_eq!(expire(9, 5, true), Expiry::Exhausted { attempts: 10 });
        assert_eq!(
            expire(u8::MAX, 100, true),
            Expiry::Exhausted { attempts: u8::MAX }
        );
    }

    #[test]
    fn an_expiry_under_the_orgs_write_limit_uses_no_attempt() {
        // A 30 s lease that ran out at 100 s.
        let lease = Lease {
            expires_at: 100_000,
            ..grant(70_000, 30)
        };
        assert!(expiry_counts(&lease, None));
        // Refused within its last period: the limit, not the work.
        assert!(!expiry_counts(&lease, Some(70_000)));
        assert!(!expiry_counts(&lease, Some(99_000)));
        // Refused longer ago than a whole lease: its holder had time.
        assert!(expiry_counts(&lease, Some(69_999)));
        assert_eq!(expire(4, 5, false), Expiry::Requeue { attempts: 4 });
        assert_eq!(expire(0, 1, false), Expiry::Requeue { attempts: 0 });
    }

    #[test]
    fn renewal_never_shortens() {
        let lease = grant(1_000, 10);
        assert_eq!(lease.expires_at, 11_000);
        assert_eq!(renew(lease, 5_000).expires_at, 15_000);
        let long = Lease {
            expires_at: 100_000,
            ..lease
        };
        assert_eq!(renew(long, 5_000).expires_at, 100_000);
        assert_eq!(renew(lease, 5_000).lease_id, lease.lease_id);
    }

    #[test]
    fn queue_pops_in_expiry_order_up_to_now() {
        let (a, b, c) = (TaskId::new_v7(), TaskId::new_v7(), TaskId::new_v7());
        let mut q = LeaseQueue::default();
        q.insert(30, c);
        q.insert(10, a);
        q.insert(20, b);
        assert_eq!(q.next_deadline(), Some(10));
        assert_eq!(q.pop_expired(20), vec![a, b]);
        assert_eq!(q.next_deadline(), Some(30));
        q.remove(30, c);
        assert!(q.is_empty());
    }
}
