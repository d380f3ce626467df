//! The language-model seam: the planner and the report writers ask an
//! OpenAI-compatible chat model through this trait (the binary implements
//! it over HTTP). The engine never knows which model answers. A report
//! writer that gets no answer falls back to its built-in template; the
//! planner answers 502.

use std::future::Future;
use std::pin::Pin;

/// Why the model gave no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatError {
    /// Not reachable, timed out, overloaded: trying later may work.
    #[error("the language model is unavailable: {0}")]
    Unavailable(String),
    /// It answered, but not with a chat completion.
    #[error("the language model answered badly: {0}")]
    BadAnswer(String),
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system` or `user`.
    pub role: &'static str,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: "system",
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user",
            content: content.into(),
        }
    }
}

pub type ChatFuture<'a> = Pin<Box<dyn Future<Output = Result<String, ChatError>> + Send + 'a>>;

pub trait ChatModel: Send + Sync + 'static {
    /// The text of the model's first choice.
    fn complete(&self, messages: Vec<ChatMessage>) -> ChatFuture<'_>;
}
