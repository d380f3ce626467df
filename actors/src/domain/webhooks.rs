//! Outbound webhooks' pure rules (CONTRACT §7): the event types and which
//! of them a transition makes, what an endpoint's subscription matches,
//! the retry schedule, and the Standard Webhooks signature (which addresses
//! an endpoint may reach is `addresses.rs`). No I/O: the org actor and the
//! delivery worker apply them.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{TaskStatus, WebhookId};

/// What an event says happened.
// The one vocabulary of the event log, the event stream, webhooks and the
// board, its names as they are sent (`as_str`); the OpenAPI document's
// `EventKind`, its text as this doc says.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[schemars(rename = "EventKind")]
pub enum EventType {
    #[serde(rename = "task.created")]
    Created,
    #[serde(rename = "task.claimed")]
    Claimed,
    #[serde(rename = "task.completed")]
    Completed,
    #[serde(rename = "task.failed")]
    Failed,
    #[serde(rename = "task.canceled")]
    Canceled,
    #[serde(rename = "task.lease_expired")]
    LeaseExpired,
    #[serde(rename = "task.unblocked")]
    Unblocked,
    /// Every transition, creation included.
    #[serde(rename = "task.status_changed")]
    StatusChanged,
    /// `POST /webhooks/{webhook_id}/test`.
    // Sent to that endpoint whatever it subscribed to.
    #[serde(rename = "webhook.test")]
    Test,
}

impl EventType {
    /// The types an endpoint may subscribe to, in the contract's order.
    pub const SUBSCRIBABLE: [EventType; 8] = [
        EventType::Created,
        EventType::Claimed,
        EventType::Completed,
        EventType::Failed,
        EventType::Canceled,
        EventType::LeaseExpired,
        EventType::Unblocked,
        EventType::StatusChanged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Created => "task.created",
            EventType::Claimed => "task.claimed",
            EventType::Completed => "task.completed",
            EventType::Failed => "task.failed",
            EventType::Canceled => "task.canceled",
            EventType::LeaseExpired => "task.lease_expired",
            EventType::Unblocked => "task.unblocked",
            EventType::StatusChanged => "task.status_changed",
            EventType::Test => "webhook.test",
        }
    }

    /// A subscribable type by its name; `None` for any other name.
    pub fn subscribable(name: &str) -> Option<EventType> {
        Self::SUBSCRIBABLE.into_iter().find(|t| t.as_str() == name)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// What an endpoint subscribed to: its `events` as written (`*` or type
/// names), and the set they stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    names: Vec<String>,
    mask: u16,
}

impl Subscription {
    /// `*` subscribes to every type; an unknown name is an error, naming it.
    pub fn parse(names: &[String]) -> Result<Self, String> {
        let mut mask = 0;
        for name in names {
            mask |= if name == "*" {
                EventType::SUBSCRIBABLE.iter().fold(0, |m, t| m | t.bit())
            } else {
                EventType::subscribable(name)
                    .ok_or_else(|| format!("unknown event type {name:?}"))?
                    .bit()
            };
        }
        Ok(Self {
            names: names.to_vec(),
            mask,
        })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn matches(&self, event: EventType) -> bool {
        event == EventType::Test || self.mask & event.bit() != 0
    }

    /// The types of `made` this subscription takes.
    pub fn takes(&self, made: EventSet) -> EventSet {
        EventSet(made.0 & (self.mask | EventType::Test.bit()))
    }
}

/// The event types one state change makes, most specific first and
/// `task.status_changed` last. `from` is `None` for a creation;
/// `lease_expired` marks the change made by a lease that ran out.
pub fn event_types(
    from: Option<TaskStatus>,
    to: TaskStatus,
    lease_expired: bool,
) -> impl Iterator<Item = EventType> {
    let cause = match from {
        None => Some(EventType::Created),
        Some(_) if lease_expired => Some(EventType::LeaseExpired),
        Some(TaskStatus::Blocked) if to == TaskStatus::Pending => Some(EventType::Unblocked),
        Some(_) if to == TaskStatus::InProgress => Some(EventType::Claimed),
        Some(_) => None,
    };
    let outcome = match to {
        TaskStatus::Completed => Some(EventType::Completed),
        TaskStatus::Failed => Some(EventType::Failed),
        TaskStatus::Canceled => Some(EventType::Canceled),
        _ => None,
    };
    cause
        .into_iter()
        .chain(outcome)
        .chain([EventType::StatusChanged])
}

/// An endpoint as its org's actor holds it: what it needs to put events
/// in the outbox and to answer a listing. Its secret stays in the store.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub webhook_id: WebhookId,
    pub url: String,
    pub subscription: Subscription,
    pub description: Option<String>,
    pub active: bool,
    pub created_at: i64,
}

/// The types of one change that one endpoint takes: what one outbox row
/// carries, so that a claim seen by an endpoint subscribed to `*` is one
/// row (`task.claimed` and `task.status_changed`), not one per type. They
/// are delivered one by one in [`EventSet::DELIVERY_ORDER`], which is
/// [`event_types`]'s: the cause, then the outcome, then
/// `task.status_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventSet(u16);

impl EventSet {
    pub const DELIVERY_ORDER: [EventType; 9] = [
        EventType::Created,
        EventType::LeaseExpired,
        EventType::Unblocked,
        EventType::Claimed,
        EventType::Completed,
        EventType::Failed,
        EventType::Canceled,
        EventType::StatusChanged,
        EventType::Test,
    ];

    pub fn insert(&mut self, event: EventType) {
        self.0 |= event.bit();
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The types in delivery order.
    pub fn iter(self) -> impl Iterator<Item = EventType> {
        Self::DELIVERY_ORDER
            .into_iter()
            .filter(move |t| self.0 & t.bit() != 0)
    }

    /// As stored: the names in delivery order, space-separated.
    pub fn text(self) -> String {
        self.iter()
            .map(EventType::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Reads [`EventSet::text`]; an unknown name is an error, naming it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut set = EventSet::default();
        for name in text.split_ascii_whitespace() {
            let event = Self::DELIVERY_ORDER
                .into_iter()
                .find(|t| t.as_str() == name)
                .ok_or_else(|| format!("unknown event type {name:?}"))?;
            set.insert(event);
        }
        Ok(set)
    }
}

/// The `webhook-id` of the state event `event_id` of the log: `evt_` and
/// the id, which no other event of any org has.
pub fn log_message_id(event_id: i64) -> String {
    format!("evt_{event_id}")
}

/// The `webhook-id` of the `index`-th type of an event whose first type's
/// id is `event_id`: the same on every attempt, distinct for each type.
/// An id of the log (`evt_` and its number) gets `_` and the index. A test
/// event's id (`evt_` and 32 hex digits, a UUIDv7; so were those of every
/// event before the log was delivered) counts on in the hex: the 62
/// random bits of a UUIDv7 make another event's id within a few steps of
/// this one a one-in-2^60 chance.
pub fn message_id(event_id: &str, index: usize) -> String {
    if index == 0 {
        return event_id.to_owned();
    }
    match event_id
        .strip_prefix("evt_")
        .filter(|hex| hex.len() == 32)
        .and_then(|hex| u128::from_str_radix(hex, 16).ok())
    {
        Some(n) => format!("evt_{:032x}", n.wrapping_add(index as u128)),
        None => format!("{event_id}_{index}"),
    }
}

/// A task's change as an event reports it: ids and statuses, never the
/// task's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub from_status: Option<TaskStatus>,
    pub to_status: TaskStatus,
    pub agent_id: String,
}

/// One change for one endpoint, as the outbox stores it. The body is not
/// stored: the delivery worker writes it from these fields, the same bytes
/// on every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    pub webhook_id: WebhookId,
    /// The `webhook-id` of the first of `types` (see [`message_id`]).
    pub event_id: String,
    pub types: EventSet,
    /// Orders an endpoint's events: those of one task are delivered in
    /// order (the task's id; a test event's own id).
    pub task_key: String,
    /// `None` for `webhook.test`.
    pub transition: Option<Transition>,
    pub created_at: i64,
}

/// How long an event is retried after it was made.
pub const RETRY_WINDOW_MS: i64 = 24 * 3_600_000;
/// The first waits between attempts; after them, every two hours.
const BACKOFF_MS: [i64; 6] = [5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000];
const LATER_BACKOFF_MS: i64 = 2 * 3_600_000;
/// A wait is moved by up to this share of itself, either way, so that the
/// retries of many events that failed together spread out.
pub const JITTER: f64 = 0.1;

/// The wait after the `failed`-th failed attempt (1 for the first), before
/// jitter.
pub fn backoff_ms(failed: u32) -> i64 {
    let i = failed.max(1) as usize - 1;
    BACKOFF_MS.get(i).copied().unwrap_or(LATER_BACKOFF_MS)
}

/// When to try again after the `failed`-th failed attempt at `now` of an
/// event made at `created_at`, or `None` once the retry window is spent.
/// `jitter` is in `[-1, 1]` (a random draw); a `Retry-After` of the
/// receiver's (in seconds) is honoured when it asks for longer.
pub fn next_attempt(
    failed: u32,
    created_at: i64,
    now: i64,
    jitter: f64,
    retry_after_secs: Option<u64>,
) -> Option<i64> {
    let base = backoff_ms(failed);
    let jittered = base + (base as f64 * JITTER * jitter.clamp(-1.0, 1.0)) as i64;
    let asked = retry_after_secs.map_or(0, |s| {
        i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
    });
    let at = now.saturating_add(jittered.max(asked));
    (at <= created_at.saturating_add(RETRY_WINDOW_MS)).then_some(at)
}

/// The prefix of a secret as clients see it.
pub const SECRET_PREFIX: &str = "whsec_";

/// A secret's bytes as clients see them: `whsec_` and base64.
pub fn secret_text(secret: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", STANDARD.encode(secret))
}

/// The Standard Webhooks signature of a message: `v1,` and the base64
/// HMAC-SHA256 of `{id}.{timestamp}.{body}` under the secret's bytes.
pub fn sign(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: one signature per secret in use,
/// space-separated (two during a rotation's overlap).
pub fn signature_header<'a>(
    secrets: impl IntoIterator<Item = &'a [u8]>,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .into_iter()
        .map(|s| sign(s, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    fn types(from: Option<TaskStatus>, to: TaskStatus, expired: bool) -> Vec<&'static str> {
        event_types(from, to, expired)
            .map(EventType::as_str)
            .collect()
    }

    #[test]
    fn each_transition_makes_its_types_and_status_changed() {
        assert_eq!(
            types(None, Pending, false),
            ["task.created", "task.status_changed"]
        );
        assert_eq!(
            types(None, Blocked, false),
            ["task.created", "task.status_changed"]
        );
        assert_eq!(
            types(Some(Pending), InProgress, false),
            ["task.claimed", "task.status_changed"]
        );
        assert_eq!(
            types(Some(InProgress), Completed, false),
            ["task.completed", "task.status_changed"]
        );
        assert_eq!(
            types(Some(InProgress), Failed, false),
            ["task.failed", "task.status_changed"]
        );
        assert_eq!(
            types(Some(Pending), Canceled, false),
            ["task.canceled", "task.status_changed"]
        );
        assert_eq!(
            types(Some(InProgress), Pending, true),
            ["task.lease_expired", "task.status_changed"]
        );
        assert_eq!(
            types(Some(InProgress), Failed, true),
            ["task.lease_expired", "task.failed", "task.status_changed"]
        );
        assert_eq!(
            types(Some(Blocked), Pending, false),
            ["task.unblocked", "task.status_changed"]
        );
        assert_eq!(
            types(Some(Blocked), Failed, false),
            ["task.failed", "task.status_changed"]
        );
        assert_eq!(
            types(Some(InProgress), Paused, false),
            ["task.status_changed"]
        );
    }

    #[test]
    fn each_type_is_sent_by_its_name() {
        for t in EventSet::DELIVERY_ORDER {
            let sent = serde_json::to_string(&t).unwrap();
            assert_eq!(sent, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<EventType>(&sent).unwrap(), t);
        }
        assert_eq!(
            EventType::subscribable("task.failed"),
            Some(EventType::Failed)
        );
        assert_eq!(EventType::subscribable("webhook.test"), None);
    }

    #[test]
    fn an_event_set_keeps_the_delivery_order_and_reads_back_its_text() {
        for (from, to, expired) in [
            (Some(InProgress), Failed, true),
            (None, Pending, false),
            (Some(Blocked), Pending, false),
            (Some(Pending), InProgress, false),
        ] {
            let mut set = EventSet::default();
            for t in event_types(from, to, expired)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                set.insert(t);
            }
            let order: Vec<_> = set.iter().map(EventType::as_str).collect();
            assert_eq!(order, types(from, to, expired));
            assert_eq!(EventSet::parse(&set.text()), Ok(set));
        }
        assert_eq!(
            EventSet::parse("task.claimed task.status_changed")
                .unwrap()
                .text(),
            "task.claimed task.status_changed"
        );
        assert!(EventSet::parse("webhook.test").is_ok());
        assert!(EventSet::parse("task.claimed task.exploded").is_err());
        assert!(EventSet::default().is_empty());
    }

    #[test]
    fn message_ids_are_the_event_id_first_then_distinct_and_stable() {
        let id = "evt_0193c3b1a2b47c3d8e9f0a1b2c3d4e5f";
        assert_eq!(message_id(id, 0), id);
        assert_eq!(message_id(id, 1), "evt_0193c3b1a2b47c3d8e9f0a1b2c3d4e60");
        assert_eq!(message_id(id, 2), "evt_0193c3b1a2b47c3d8e9f0a1b2c3d4e61");
        assert_eq!(message_id("evt_other", 1), "evt_other_1");
        // An id of the log, whose digits would read as hex too.
        assert_eq!(log_message_id(1234), "evt_1234");
        assert_eq!(message_id("evt_1234", 0), "evt_1234");
        assert_eq!(message_id("evt_1234", 2), "evt_1234_2");
    }

    #[test]
    fn subscriptions_match_their_types_star_everything_and_test_always() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = Subscription::parse(&names(&["*"])).unwrap();
        assert!(EventType::SUBSCRIBABLE.iter().all(|t| all.matches(*t)));
        let some = Subscription::parse(&names(&["task.completed", "task.status_changed"])).unwrap();
        assert!(some.matches(EventType::Completed));
        assert!(some.matches(EventType::StatusChanged));
        assert!(!some.matches(EventType::Claimed));
        assert!(some.matches(EventType::Test));
        let changes = Subscription::parse(&names(&["task.status_changed"])).unwrap();
        assert!(!changes.matches(EventType::Failed));
        assert!(Subscription::parse(&names(&["task.exploded"])).is_err());
        let claim = EventSet::parse("task.claimed task.status_changed").unwrap();
        assert_eq!(changes.takes(claim).text(), "task.status_changed");
        assert_eq!(all.takes(claim), claim);
        assert!(some.takes(claim).text() == "task.status_changed");
        assert_eq!(
            some.names(),
            names(&["task.completed", "task.status_changed"])
        );
    }

    #[test]
    fn the_schedule_backs_off_then_waits_two_hours_until_a_day_has_passed() {
        let waits: Vec<i64> = (1..=9).map(backoff_ms).collect();
        assert_eq!(
            waits,
            [
                5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000, 7_200_000, 7_200_000,
                7_200_000
            ]
        );
        assert_eq!(next_attempt(1, 0, 0, 0.0, None), Some(5_000));
        // Inside the window, and the first attempt that would land past it.
        let late = RETRY_WINDOW_MS - LATER_BACKOFF_MS;
        assert_eq!(next_attempt(9, 0, late, 0.0, None), Some(RETRY_WINDOW_MS));
        assert_eq!(next_attempt(9, 0, late + 1, 0.0, None), None);
    }

    #[test]
    fn jitter_stays_within_a_tenth_of_the_wait() {
        for failed in 1..12 {
            let base = backoff_ms(failed);
            let low = next_attempt(failed, 0, 0, -1.0, None).unwrap();
            let high = next_attempt(failed, 0, 0, 1.0, None).unwrap();
            assert_eq!(low, base - base / 10);
            assert_eq!(high, base + base / 10);
            assert_eq!(next_attempt(failed, 0, 0, 7.0, None), Some(high));
        }
    }

    #[test]
    fn retry_after_is_honoured_when_longer_and_never_past_the_window() {
        assert_eq!(next_attempt(1, 0, 0, 0.0, Some(60)), Some(60_000));
        assert_eq!(next_attempt(1, 0, 0, 0.0, Some(1)), Some(5_000));
        assert_eq!(next_attempt(1, 0, 0, 0.0, Some(90_000)), None);
        assert_eq!(next_attempt(1, 0, 0, 0.0, Some(u64::MAX)), None);
    }

    /// The example of the Standard Webhooks specification's reference
    /// libraries (and of `standardwebhooks` on PyPI).
    #[test]
    fn signatures_match_the_standard_webhooks_vector() {
        let secret = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign(
                &secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let other = [7u8; 32];
        let both = signature_header([&secret[..], &other[..]], "m", 1, b"{}");
        assert_eq!(both.split(' ').count(), 2);
        assert!(both.starts_with(&sign(&secret, "m", 1, b"{}")));
        assert!(secret_text(&[0u8; 32]).starts_with("whsec_AAAA"));
    }
}
