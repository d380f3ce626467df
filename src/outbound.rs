//! Where every outbound HTTP client of the server starts, so that each
//! says whether it takes proxies from the environment, and none fails to
//! build on a machine without CA certificates.
//!
//! Proxies (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY`, which
//! reqwest follows unless told not to):
//! - Webhooks ignore them. A webhook's URL is the user's to choose; what
//!   keeps it from reaching inside the network is that the delivery client
//!   resolves the host itself and connects to public addresses only
//!   (`webhooks.rs`). Through a proxy, the proxy resolves and connects, the
//!   check is stepped around, and a webhook reaches whatever the proxy can:
//!   loopback and private services included.
//! - The other nodes of a cluster are reached without them: the nodes talk
//!   on the cluster's own network at their advertise URLs, the forwarded
//!   requests carry callers' API keys and the peer token, and a proxy
//!   meant for the way out usually cannot reach the nodes.
//! - Model endpoints (chat, embeddings, moderation) take them: the operator
//!   writes those URLs, and where the only way out is a proxy, it is how
//!   they are reached (`NO_PROXY` exempts one inside the network).
//! - The command line's clients (`taskq keys rotate-master --url`,
//!   `taskq mcp`) take them, as command-line HTTP clients do.
//!
//! CA roots: reqwest's rustls verifier reads the system's roots when a
//! client is built and fails the build when there are none (a minimal
//! image without `ca-certificates`), which stopped a server that makes no
//! HTTPS call at all. The roots are looked for once, the same way; without
//! any, each client is built trusting no root: plain HTTP works, and an
//! HTTPS call is refused before it connects, with [`NoCaRoots`]'s reason
//! in the delivery log or the endpoint's error. `taskq serve` warns at
//! start. No roots are carried in the binary: they would go stale with
//! it, and would pass over the trust an operator configured.

use std::sync::OnceLock;

/// Whether a client follows the proxy variables of the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxies {
    FromEnvironment,
    Ignored,
}

/// An HTTPS call on a machine where no CA certificate was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot verify HTTPS servers: no CA certificates were found on this machine \
     (install ca-certificates, or point SSL_CERT_FILE or SSL_CERT_DIR at them, \
     then restart the server)"
)]
pub struct NoCaRoots;

/// A client builder with the proxy rule asked for and, on a machine
/// without CA roots, no root at all instead of a failed build.
pub fn client_builder(proxies: Proxies) -> reqwest::ClientBuilder {
    let mut builder = reqwest::Client::builder();
    if proxies == Proxies::Ignored {
        builder = builder.no_proxy();
    }
    if !ca_roots_found() {
        builder = builder.tls_certs_only(std::iter::empty());
    }
    builder
}

/// Refuses a call to an HTTPS `url` when no CA roots were found: it could
/// not verify the server, and would fail with a less telling error.
pub fn check_tls(url: &str) -> Result<(), NoCaRoots> {
    let https = url::Url::parse(url).is_ok_and(|u| u.scheme() == "https");
    if https && !ca_roots_found() {
        return Err(NoCaRoots);
    }
    Ok(())
}

/// Whether the system has CA roots, looked for once per process.
pub fn ca_roots_found() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(system_roots_load)
}

/// Where reqwest's verifier reads the system's roots itself (Linux and the
/// other Unix systems but Apple's): the same files (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` when set, else the distribution's bundle), counted as it
/// counts them.
#[cfg(all(unix, not(target_os = "android"), not(target_vendor = "apple")))]
fn system_roots_load() -> bool {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    !roots.is_empty()
}

/// Elsewhere the verifier asks the operating system at each connection and
/// builds without roots of its own.
#[cfg(not(all(unix, not(target_os = "android"), not(target_vendor = "apple"))))]
fn system_roots_load() -> bool {
    true
}
