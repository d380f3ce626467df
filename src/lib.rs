//! The `taskq` binary's library: the HTTP and MCP front ends and the
//! command line.
//!
//! The engine (actors, rules, storage) lives in the `taskq-actors` crate;
//! this crate only speaks HTTP and parses configuration. The dependency
//! points one way: nothing in `taskq-actors` knows about this crate. The
//! load tool is the `taskq-bench` crate, which starts this binary as a
//! child process (`taskq-process`, re-exported here as `process` for the
//! black-box tests) and links neither crate.

pub mod cli;
pub mod embed;
pub mod http;
pub mod keyfiles;
pub mod llm;
pub mod mcp;
pub mod moderation;
pub mod outbound;
pub mod webhooks;

pub use taskq_process as process;

/// Installs ring as rustls's process-wide crypto provider: the server's
/// TLS and every outgoing HTTPS connection (moderation, embeddings and
/// chat endpoints, MCP bridge) use it. Call once before building an
/// HTTP client; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
