//! The keep-alive of a stream to a browser or an agent (CONTRACT §10): a
//! comment after [`KEEP_ALIVE_MS`] of silence, so that the connection is
//! seen to be alive. The event stream and the board's stream share it.
//!
//! Silence is measured on the engine's clock, which a test may move: the
//! hub says when it moved (`EventHub::clock_moved`) and the keep-alive
//! looks again. One timer serves a stream's life, moved on only when it
//! fires before the keep-alive is due: a stream that sends a thousand
//! times a second does not set a timer each time.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::hub::EventHub;
use crate::clock::Clock;

/// How long a stream stays silent before it sends a comment (CONTRACT §10).
pub const KEEP_ALIVE_MS: i64 = 15_000;

/// When a stream last sent something, and the timer that wakes it to look
/// whether a keep-alive is due.
pub struct KeepAlive {
    clock: Arc<dyn Clock>,
    clock_moves: watch::Receiver<u64>,
    /// When the stream last sent something, by the engine's clock.
    sent_at: i64,
    timer: Pin<Box<Sleep>>,
}

impl KeepAlive {
    /// A stream's keep-alive, its silence starting now.
    pub fn new(hub: &EventHub, clock: Arc<dyn Clock>) -> Self {
        let sent_at = clock.now_ms();
        Self {
            clock,
            clock_moves: hub.clock_moves(),
            sent_at,
            timer: Box::pin(tokio::time::sleep(in_ms(KEEP_ALIVE_MS))),
        }
    }

    /// The stream sent something: its silence starts again.
    pub fn sent(&mut self) {
        self.sent_at = self.clock.now_ms();
    }

    /// Waits until a keep-alive is due, and counts it sent; `None` when
    /// the hub is gone with the engine. Cancel-safe: a stream waits for
    /// it beside its events.
    pub async fn due(&mut self) -> Option<()> {
        loop {
            let quiet = self.clock.now_ms() - self.sent_at;
            if quiet >= KEEP_ALIVE_MS {
                self.sent();
                return Some(());
            }
            tokio::select! {
                () = self.timer.as_mut() => {
                    // Sent something since it was set: due later.
                    let due = Instant::now() + in_ms(KEEP_ALIVE_MS - quiet);
                    self.timer.as_mut().reset(due);
                }
                moved = self.clock_moves.changed() => moved.ok()?,
            }
        }
    }
}

fn in_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::OffsetClock;

    /// Whether a keep-alive comes due within a moment.
    async fn comes_due(keep_alive: &mut KeepAlive) -> bool {
        let due = keep_alive.due();
        tokio::time::timeout(Duration::from_millis(50), due)
            .await
            .is_ok_and(|due| due.is_some())
    }

    #[tokio::test]
    async fn a_keep_alive_is_due_after_the_silence_on_the_engines_clock() {
        const MOMENT: i64 = 5_000;
        let hub = EventHub::default();
        let clock = Arc::new(OffsetClock::default());
        let mut keep_alive = KeepAlive::new(&hub, clock.clone());
        assert!(!comes_due(&mut keep_alive).await, "not yet");
        clock.advance(KEEP_ALIVE_MS - MOMENT);
        hub.clock_moved();
        assert!(!comes_due(&mut keep_alive).await, "a moment early");
        clock.advance(MOMENT);
        hub.clock_moved();
        assert!(comes_due(&mut keep_alive).await);
        // Counted sent: the next is a whole silence away, and something
        // sent meanwhile puts it off again.
        clock.advance(KEEP_ALIVE_MS - MOMENT);
        keep_alive.sent();
        clock.advance(MOMENT);
        hub.clock_moved();
        assert!(!comes_due(&mut keep_alive).await, "put off");
        clock.advance(KEEP_ALIVE_MS);
        hub.clock_moved();
        assert!(comes_due(&mut keep_alive).await);
    }
}
