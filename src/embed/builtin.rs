//! all-MiniLM-L6-v2 in process (candle, CPU only), from a sentence-transformers
//! folder: `config.json`, `tokenizer.json`, `model.safetensors`, read whole
//! (mapping the file would need `unsafe`). Each text is cut at 256 tokens
//! (the model's `max_seq_length`), a batch is padded to its longest text,
//! and token vectors are mean-pooled over the attention mask and
//! L2-normalised, as sentence-transformers does: the vectors match its.
//!
//! Inference runs on one dedicated thread at the lowest scheduling priority:
//! a one-thread rayon pool, so candle's parallel matmuls stay on it too. It
//! never holds a tokio worker and leaves the other core to requests;
//! `embed` queues the batch there and awaits the answer on a oneshot.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use taskq_actors::embed::{EmbedError, EmbedFuture, Embedder};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// The name vectors are stored under: another model's vectors are remade.
pub const MODEL_NAME: &str = "builtin:all-MiniLM-L6-v2";

/// What a model folder must hold. `model.safetensors` is the one that says
/// a model is installed, so `models fetch` puts it in place last.
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// MiniLM was trained on inputs of at most this many tokens.
const MAX_TOKENS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a BERT configuration")]
    Config {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} is not a usable tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("{path} does not hold this model's weights")]
    Weights {
        path: PathBuf,
        source: candle_core::Error,
    },
    #[error("starting the embedding thread")]
    Thread(#[from] rayon::ThreadPoolBuildError),
}

pub struct BuiltinEmbedder {
    model: Arc<Model>,
    /// One thread: every batch runs there, one after another.
    pool: rayon::ThreadPool,
}

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
}

impl BuiltinEmbedder {
    /// Reads the model folder (about 90 MB) and starts the embedding
    /// thread. Blocking: call it off the async runtime.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let path = dir.join("config.json");
        let config: Config = serde_json::from_slice(&read(&path)?)
            .map_err(|source| LoadError::Config { path, source })?;

        let path = dir.join("tokenizer.json");
        let tokenizer =
            tokenizer(&read(&path)?).map_err(|message| LoadError::Tokenizer { path, message })?;

        let path = dir.join("model.safetensors");
        let bert = VarBuilder::from_buffered_safetensors(read(&path)?, DType::F32, &Device::Cpu)
            .and_then(|weights| BertModel::load(weights, &config))
            .map_err(|source| LoadError::Weights { path, source })?;

        Ok(Self {
            model: Arc::new(Model { bert, tokenizer }),
            pool: inference_pool()?,
        })
    }
}

impl Embedder for BuiltinEmbedder {
    fn model(&self) -> &str {
        MODEL_NAME
    }

    fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let model = Arc::clone(&self.model);
        self.pool.spawn(move || {
            // A caller that gave up while the batch waited needs no vectors.
            if answer.is_closed() {
                return;
            }
            let vectors = std::panic::catch_unwind(AssertUnwindSafe(|| model.embed(texts)))
                .unwrap_or_else(|_| Err(EmbedError::BadAnswer("the model panicked".into())));
            let _ = answer.send(vectors);
        });
        Box::pin(async move {
            answered.await.unwrap_or_else(|_| {
                Err(EmbedError::Unavailable(
                    "the embedding thread stopped".into(),
                ))
            })
        })
    }
}

impl Model {
    fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| EmbedError::BadAnswer(format!("tokenizing: {e}")))?;
        // Padding made every encoding as long as the longest.
        let width = encodings[0].len();
        let mut ids = Vec::with_capacity(encodings.len() * width);
        let mut mask = Vec::with_capacity(encodings.len() * width);
        for encoding in &encodings {
            ids.extend_from_slice(encoding.get_ids());
            mask.extend_from_slice(encoding.get_attention_mask());
        }
        self.forward(ids, mask, (encodings.len(), width))
            .map_err(|e| EmbedError::BadAnswer(format!("inference: {e}")))
    }

    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        shape: (usize, usize),
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, shape, &Device::Cpu)?;
        let mask = Tensor::from_vec(mask, shape, &Device::Cpu)?;
        let token_types = ids.zeros_like()?;
        let tokens = self.bert.forward(&ids, &token_types, Some(&mask))?;
        // Mean over the real tokens only: padding must not move a vector.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let sums = tokens.broadcast_mul(&mask)?.sum(1)?;
        let means = sums.broadcast_div(&mask.sum(1)?)?;
        let norms = means
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12f32, f32::MAX)?;
        means.broadcast_div(&norms)?.to_vec2()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The folder's tokenizer, padding per batch and cutting at [`MAX_TOKENS`]
/// (a saved tokenizer may pad every text to a fixed length, or cut sooner).
fn tokenizer(json: &[u8]) -> Result<Tokenizer, String> {
    let mut tokenizer = Tokenizer::from_bytes(json).map_err(|e| e.to_string())?;
    let padding = PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        ..tokenizer.get_padding().cloned().unwrap_or_default()
    };
    tokenizer.with_padding(Some(padding));
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: MAX_TOKENS,
            ..TruncationParams::default()
        }))
        .map_err(|e| e.to_string())?;
    Ok(tokenizer)
}

/// The embedding thread. Work candle or the tokenizer hands to rayon from
/// inside it stays on it (candle's own elementwise threads are kept away by
/// `embed::confine_inference_threads`).
fn inference_pool() -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "taskq-embed".into())
        .start_handler(|_| lower_priority())
        .build()
}

/// Niceness 19 on Linux: the scheduler gives requests the core first.
fn lower_priority() {
    use thread_priority::{set_current_thread_priority, ThreadPriority};
    if let Err(e) = set_current_thread_priority(ThreadPriority::Min) {
        tracing::warn!(error = ?e, "could not lower the embedding thread's priority");
    }
}

// The black-box tests' gate, so that one rule says what a missing
// `TASKQ_TEST_EMBEDDINGS_MODEL_DIR` does (the test built as ignored, or
// failing when it runs without it).
#[cfg(test)]
#[path = "../../tests/it/common/environment.rs"]
mod environment;

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::time::Instant;

    use super::*;

    /// The model named by `TASKQ_TEST_EMBEDDINGS_MODEL_DIR`, loaded once
    /// for every test here (`taskq_test_env = "model"`).
    fn embedder() -> &'static BuiltinEmbedder {
        static EMBEDDER: OnceLock<BuiltinEmbedder> = OnceLock::new();
        let dir = environment::need("TASKQ_TEST_EMBEDDINGS_MODEL_DIR");
        EMBEDDER
            .get_or_init(|| BuiltinEmbedder::load(Path::new(&dir)).expect("loading the test model"))
    }

    fn texts(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[tokio::test]
    #[cfg_attr(
        not(taskq_test_env = "model"),
        ignore = "needs TASKQ_TEST_EMBEDDINGS_MODEL_DIR (all-MiniLM-L6-v2's folder)"
    )]
    async fn gives_sentence_transformers_reference_vector() {
        let embedder = embedder();
        let vectors = embedder
            .embed(texts(&["This is an example sentence"]))
            .await
            .unwrap();
        assert_eq!(vectors.len(), 1);
        assert_eq!(vectors[0].len(), 384);
        let reference = [0.0677, 0.0635, 0.0487, 0.0793, 0.0374];
        for (got, want) in vectors[0].iter().zip(reference) {
            assert!((got - want).abs() < 1e-3, "{:?}", &vectors[0][..5]);
        }
        assert!((dot(&vectors[0], &vectors[0]) - 1.0).abs() < 1e-5);
    }

    #[tokio::test]
    #[cfg_attr(
        not(taskq_test_env = "model"),
        ignore = "needs TASKQ_TEST_EMBEDDINGS_MODEL_DIR (all-MiniLM-L6-v2's folder)"
    )]
    async fn padding_a_batch_changes_no_vector() {
        let embedder = embedder();
        let batch = texts(&[
            "Fix the login page",
            "",
            "Migrate the billing service from the old PostgreSQL cluster to the new one before the end of the quarter",
            "Write release notes",
        ]);
        let together = embedder.embed(batch.clone()).await.unwrap();
        assert_eq!(together.len(), batch.len());
        for (text, vector) in batch.into_iter().zip(&together) {
            let alone = embedder.embed(vec![text.clone()]).await.unwrap();
            assert_eq!(alone[0].len(), 384, "{text:?}");
            for (a, b) in alone[0].iter().zip(vector) {
                assert!((a - b).abs() < 1e-4, "{text:?}: {a} alone, {b} in a batch");
            }
        }
    }

    #[tokio::test]
    #[cfg_attr(
        not(taskq_test_env = "model"),
        ignore = "needs TASKQ_TEST_EMBEDDINGS_MODEL_DIR (all-MiniLM-L6-v2's folder)"
    )]
    async fn paraphrases_are_nearer_than_unrelated_texts() {
        let embedder = embedder();
        let v = embedder
            .embed(texts(&[
                "Reset the password of a user who is locked out",
                "A locked-out user needs their password reset",
                "Bake sourdough bread for the team lunch",
            ]))
            .await
            .unwrap();
        let paraphrase = dot(&v[0], &v[1]);
        let unrelated = dot(&v[0], &v[2]);
        assert!(paraphrase > unrelated + 0.2, "{paraphrase} vs {unrelated}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_embedding_thread_runs_at_the_lowest_priority() {
        let pool = inference_pool().unwrap();
        let stat = pool.install(|| std::fs::read_to_string("/proc/thread-self/stat").unwrap());
        // Fields after the command name (which may hold spaces): state is
        // field 3, niceness field 19.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        assert_eq!(fields[19 - 3], "19", "{stat}");
    }

    /// `cargo test --lib embed::builtin -- --ignored --nocapture`
    #[tokio::test]
    #[ignore = "a measurement, not a check"]
    async fn time_batches() {
        let embedder = embedder();
        let titles: Vec<String> = (0..32)
            .map(|i| format!("Fix flaky test number {i} in the billing service's CI pipeline"))
            .collect();
        embedder.embed(titles[..1].to_vec()).await.unwrap();
        for size in [1, 32] {
            let start = Instant::now();
            let rounds = 5;
            for _ in 0..rounds {
                embedder.embed(titles[..size].to_vec()).await.unwrap();
            }
            eprintln!("batch of {size}: {:?}", start.elapsed() / rounds);
        }
    }
}
