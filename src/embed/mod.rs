//! The engine's `Embedder` seam, implemented where HTTP clients and model
//! weights may live: `builtin` runs all-MiniLM-L6-v2 in process on one
//! low-priority thread; `endpoint` asks an OpenAI-compatible embeddings
//! API. Neither ever downloads weights: `taskq models fetch` installs them
//! from a local copy.

pub mod builtin;
pub mod endpoint;

pub use builtin::{BuiltinEmbedder, LoadError};
pub use endpoint::EndpointEmbedder;

/// Where `serve` looks for the builtin model and `models fetch` puts it.
pub const DEFAULT_MODEL_DIR: &str = "taskq-data/models/all-MiniLM-L6-v2";

/// Keeps candle's own elementwise worker threads (one per core but one,
/// built on first use) from existing, so inference stays on the builtin
/// embedder's single thread and the other core serves requests. candle
/// reads only the environment for this, and changing the environment is
/// sound only while the process has one thread: call it first in `main`,
/// before the runtime starts. An operator's own setting wins.
pub fn confine_inference_threads() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}
