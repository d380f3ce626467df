//! The taskq engine.
//!
//! Everything that decides what happens to an org's data lives here: the
//! typed requests and answers every front end speaks (`api`), the pure
//! domain rules (`domain`), the per-org actors that own the hot state and
//! order every change (`org`), the supervisor that spawns, idles out and
//! restarts them (`supervisor`), the group-commit writer (`writer`), the
//! grouped reader (`reader`), storage (`store`) and encryption at rest
//! (`crypto`). Front ends talk only to [`Engine`] in `api` types; nothing
//! here knows about HTTP or MCP, and the actors, writer and store are
//! private to the crate.
//!
//! # What crosses which boundary
//!
//! | from → to | what crosses |
//! |---|---|
//! | front end → `Engine` | a `Caller` and an `api` request; back an `api` answer or an `EngineError` (`code()`, `body()`, `retry_after()`) |
//! | front end → `Engine::reject_as` | a request that did not decode, with its operation's kind and paid feature: the engine answers the plan gate, a spent limit or the validation error, and counts it |
//! | `Engine` → org actor | one `OrgMsg` with named fields and a reply port; back an `Outcome { result, commit }` (a claim's with a `ClaimTicket` per task, which undoes it if dropped unanswered) |
//! | org actor → writer | a `WriteBatch` through a `WriteSlot` taken before memory changed |
//! | writer → store | the batches of one group commit, coalesced by `CommitPlan`; on PostgreSQL each batch's `Fence` (node, epoch), checked by the commit's statement |
//! | org actor → store, off its turn | a read ahead of pending tasks' content: a spawned task waits for the org's `barrier`, reads, and casts `OrgMsg::ContentRead` back; the actor never awaits it |
//! | org actor → supervisor | an `OrgEvent` (idle, stopped holding leases) through the `OrgEvents` hook |
//! | writer → supervisor | an org whose commit failed, through the `FailureHook` |
//! | `Engine` → supervisor | `Resolve { org, stale }` when a route is missing or its actor refused a message |
//! | `Engine` → reports actor | `Recompute { org, kinds }` (the operator's), `OrgAdded` |
//! | reports actor, meaning worker, delivery worker → store | reads; their writes through the writer or statements of their own; never an `OrgMsg`, but the delivery worker's endpoint disable (`PeerOp::DisableWebhook`, to the org's owner) |
//! | node → node | a whole HTTP request for an org the other owns, marked `x-taskq-forwarded`, its answer streamed back; or a `PeerOp` on the peer route, with the token both derive from the master key |
//! | heartbeat thread → supervisor | `Lost(org)` for every org when the trust window shut; the engine sends `HandOver(org)` to rebalance |

pub mod api;
mod background;
pub mod clock;
mod cluster;
pub mod crypto;
mod directory;
pub mod domain;
pub mod embed;
mod engine;
pub mod error;
pub mod filter;
mod health;
pub mod llm;
mod meaning;
mod org;
mod reader;
mod reports;
mod stats;
mod store;
mod supervisor;
mod views;
mod watch;
pub mod webhook_sender;
mod writer;

pub use clock::{Clock, SystemClock};
pub use cluster::{ClusterConfig, Placement};
pub use domain::account::Caller;
pub use engine::{
    parse_org_id, Engine, EngineConfig, Peer, PeerAnswer, PeerCall, PeerOp, Peers, StoreOptions,
    BOARD_SESSION, FEEDBACK_ORG_NAME, MEMBER_STRIKE_LIMIT, OPERATOR_SESSION, ORG_STRIKE_LIMIT,
};
pub use error::{EngineError, ErrorBody, ErrorCode, LimitExceeded, LimitKind, ValidationError};
pub use stats::WriterTotals;
pub use store::{backup_sqlite, Continued, CopyProgress, Migrated, TableCount};
pub use supervisor::ActorStats;
pub use watch::{
    BoardItem, BoardStream, EventStream, StreamEvent, StreamItem, BOARD_MAX_IDS, BOARD_WINDOW_MS,
};

/// Copies a stopped store into an empty one (`taskq migrate-store`),
/// waiting for PostgreSQL nodes that just stopped as long as their lease,
/// telling `progress` how far it got.
pub async fn migrate_store(
    from: &str,
    to: &str,
    progress: &mut dyn CopyProgress,
) -> Result<Migrated, store::StoreError> {
    store::migrate_store(from, to, ClusterConfig::new(String::new()).ttl, progress).await
}
