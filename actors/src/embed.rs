//! The embedder seam: the engine turns task text into vectors through this
//! trait and never knows whether a model runs in process (the binary's
//! builtin MiniLM) or behind an OpenAI-compatible endpoint. Either way the
//! engine calls it only from its background embedding worker and, within a
//! small budget, for a query or a just-created task: a slow or failing
//! embedder delays meaning, never a write.

use std::future::Future;
use std::pin::Pin;

/// Why texts got no vectors. Either way nothing else fails: tasks stay
/// queued for embedding and searches answer 503 until it works again.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedError {
    /// Not reachable, timed out, overloaded: trying later may work.
    #[error("the embedder is unavailable: {0}")]
    Unavailable(String),
    /// It answered, but not with one vector of the right length per text.
    #[error("the embedder answered badly: {0}")]
    BadAnswer(String),
}

pub type EmbedFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Vec<f32>>, EmbedError>> + Send + 'a>>;

pub trait Embedder: Send + Sync + 'static {
    /// Names the model. Vectors are stored with this name; vectors made by
    /// another model are made again, since their spaces differ.
    fn model(&self) -> &str;

    /// One vector per text, in order, all of the same length. They need
    /// not be normalised (the engine normalises them). An implementation
    /// that computes must not block the async runtime.
    fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_>;
}
