//! The webhook sender seam: the delivery worker hands each signed request
//! to this trait and never speaks HTTP itself (the engine has no HTTP
//! client). The binary implements it with reqwest; an implementation must
//! follow no redirect, give up after [`DELIVERY_TIMEOUT`], refuse to
//! connect to an address the server does not allow (checked again at
//! delivery, since DNS answers change), and keep at most
//! [`KEPT_RESPONSE_BYTES`] of the answer.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How long a receiver has to answer.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of an answer the delivery log keeps.
pub const KEPT_RESPONSE_BYTES: usize = 1024;

/// One signed request: `POST url` with a JSON body and the Standard
/// Webhooks headers.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    pub url: &'a str,
    /// `webhook-id`, `webhook-timestamp` and `webhook-signature`.
    pub headers: [(&'static str, String); 3],
    pub body: &'a str,
}

/// What came of a delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// The receiver's status, when it answered.
    pub status: Option<u16>,
    /// Its `Retry-After`, in seconds (a date is read as the seconds until it).
    pub retry_after: Option<u64>,
    /// At most [`KEPT_RESPONSE_BYTES`] of its body.
    pub response: String,
    /// Why no answer came (refused address, timeout, connection), if none did.
    pub error: Option<String>,
}

impl Sent {
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Sent> + Send + 'a>>;

pub trait WebhookSender: Send + Sync + 'static {
    fn send<'a>(&'a self, delivery: Delivery<'a>) -> SendFuture<'a>;
}
