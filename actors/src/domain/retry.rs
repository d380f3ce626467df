//! Retries with backoff (CONTRACT §9): a task created with a policy that an
//! update moves to `failed` goes back to `pending` instead, waiting a
//! delay that doubles with each retry up to a cap, while it has retries
//! left. Counted apart from the poison guard's lease expiries: a lease
//! that runs out is not a failure.

/// The longest `max_retries`, `backoff_seconds` and `max_backoff_seconds`.
pub const MAX_RETRIES: u8 = 25;
pub const MAX_BACKOFF_SECONDS: u32 = 86_400;
pub const MAX_MAX_BACKOFF_SECONDS: u32 = 604_800;
/// The defaults of an omitted `backoff_seconds` and `max_backoff_seconds`.
pub const DEFAULT_BACKOFF_SECONDS: u32 = 30;
pub const DEFAULT_MAX_BACKOFF_SECONDS: u32 = 3_600;

/// A task's retry policy, as created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_retries: u8,
    pub backoff_seconds: u32,
    pub max_backoff_seconds: u32,
}

impl RetryPolicy {
    /// Whether a failure after `retries` retries is retried.
    pub fn has_left(&self, retries: u8) -> bool {
        retries < self.max_retries
    }

    /// The wait before the retry that follows `retries` earlier ones:
    /// `min(max_backoff_seconds, backoff_seconds * 2^retries)`, plus up to a
    /// tenth of it more, as `jitter` (in `[0, 1]`, a random draw) says, so
    /// that tasks failing together do not all come back at once.
    pub fn delay_seconds(&self, retries: u8, jitter: f64) -> u64 {
        let doubled = u64::from(self.backoff_seconds)
            .checked_shl(u32::from(retries))
            .filter(|d| d >> u32::from(retries) == u64::from(self.backoff_seconds))
            .unwrap_or(u64::MAX);
        let base = doubled.min(u64::from(self.max_backoff_seconds));
        base + (base as f64 * 0.1 * jitter.clamp(0.0, 1.0)) as u64
    }
}

/// The note of the state event a retry writes: `retry K of N in S s: `
/// and the failing update's note.
pub fn retry_note(retry: u8, of: u8, seconds: u64, note: &str) -> String {
    format!("retry {retry} of {of} in {seconds} s: {note}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_retries: u8, backoff: u32, cap: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            backoff_seconds: backoff,
            max_backoff_seconds: cap,
        }
    }

    #[test]
    fn the_delay_doubles_up_to_its_cap_and_jitter_adds_at_most_a_tenth() {
        let p = policy(25, 30, 3_600);
        let delays: Vec<u64> = (0..9).map(|k| p.delay_seconds(k, 0.0)).collect();
        assert_eq!(delays, [30, 60, 120, 240, 480, 960, 1_920, 3_600, 3_600]);
        assert_eq!(p.delay_seconds(0, 1.0), 33);
        assert_eq!(p.delay_seconds(7, 1.0), 3_960);
        assert_eq!(p.delay_seconds(7, 0.5), 3_780);
        // Far past the cap, and past what 64 bits can double.
        assert_eq!(policy(25, 86_400, 604_800).delay_seconds(25, 0.0), 604_800);
        assert_eq!(policy(25, 1, 1).delay_seconds(25, 0.0), 1);
    }

    #[test]
    fn retries_run_out_after_the_policy_s_count() {
        let p = policy(2, 1, 10);
        assert!(p.has_left(0));
        assert!(p.has_left(1));
        assert!(!p.has_left(2));
        assert!(!policy(0, 1, 1).has_left(0));
    }

    #[test]
    fn a_retry_s_note_says_which_and_when() {
        assert_eq!(
            retry_note(1, 3, 31, "upstream 429"),
            "retry 1 of 3 in 31 s: upstream 429"
        );
    }
}
