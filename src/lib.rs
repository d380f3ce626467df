//! The `taskq` binary's library: the HTTP and MCP front ends and the
//! command line.
//!
//! The engine (actors, rules, storage) lives in the `taskq-actors` crate;
//! this crate only speaks HTTP, parses configuration, and starts the server
//! as a child process for the bench and the black-box tests. The dependency
//! points one way: nothing in `taskq-actors` knows about this crate.

pub mod cli;
pub mod embed;
pub mod http;
pub mod keyfiles;
pub mod llm;
pub mod mcp;
pub mod moderation;
pub mod process;
pub mod webhooks;

/// Installs ring as rustls's process-wide crypto provider: the server's
/// TLS and every outgoing HTTPS connection (moderation, embeddings and
/// chat endpoints, MCP bridge, bench) use it. Call once before building an
/// HTTP client; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
