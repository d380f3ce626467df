//! The Model Context Protocol front end: every operation as a tool, over
//! MCP's streamable HTTP transport at `/mcp` (rmcp, the official Rust SDK),
//! and a stdio bridge for clients that only launch local processes.
//!
//! The HTTP transport runs stateless: every POST is served on its own, so
//! any instance behind a load balancer can answer it. The route is behind
//! the same `X-Api-Key` authentication as the rest of the API; the caller
//! rides in the request's extensions, and each tool call makes the same
//! `Engine` call as its HTTP route, with the same roles, plan gates, limits
//! and quotas. A tool's result is the route's JSON body as text (and as
//! `structuredContent` when it is an object); a failure is `isError: true`
//! whose text is the same `error` message HTTP sends, and whose
//! `structuredContent` is the route's whole error body (a limit's
//! `limit_type` and `limit`, a plan's `upgrade`, ...) plus `retry_after`,
//! the seconds HTTP sends as `Retry-After`: a tool result has no headers,
//! and an agent told to wait must learn for how long.

pub mod bridge;
mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use taskq_actors::{Caller, EngineError, ErrorBody};

use crate::http::AppState;
pub use tools::tools;

/// The largest MCP request body, as for the rest of the API.
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

const INSTRUCTIONS: &str = "taskq is a task queue shared by agents and people. \
Claim work with claim_task, report progress and results with update_tasks (send the \
claim's lease_id), and create follow-up work with create_tasks.";

/// The tool server of one request.
#[derive(Clone)]
pub struct TaskqTools {
    state: AppState,
}

impl TaskqTools {
    /// The caller authenticated before the request reached the transport.
    fn caller(context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request carries no caller", None))
    }
}

/// The server's name and version, as MCP clients see them.
pub fn implementation() -> Implementation {
    Implementation::new("taskq", env!("CARGO_PKG_VERSION"))
}

impl ServerHandler for TaskqTools {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = implementation();
        info.instructions = Some(INSTRUCTIONS.into());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = Self::caller(&context)?;
        let arguments = request.arguments.unwrap_or_default();
        let answer = tools::call(&self.state, &caller, &request.name, arguments)
            .await
            .ok_or_else(|| {
                ErrorData::invalid_params(format!("no tool named {}", request.name), None)
            })?;
        Ok(result(answer).into())
    }
}

/// A tool's answer as MCP carries it.
fn result(answer: tools::Answer) -> CallToolResult {
    match answer {
        Ok(body) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(body.text)]);
            if body.json.is_object() {
                result.structured_content = Some(body.json);
            }
            result
        }
        Err(e) => {
            if e.is_internal() {
                tracing::error!(error = %e, "tool call failed");
            }
            let failure = ToolFailure::of(&e);
            let mut result = CallToolResult::error(vec![ContentBlock::text(&failure.body.error)]);
            result.structured_content =
                Some(serde_json::to_value(&failure).expect("an error body is plain JSON"));
            result
        }
    }
}

/// A failed tool call's `structuredContent`: the route's error body, and
/// the `Retry-After` its HTTP answer carries as a header.
#[derive(Serialize)]
struct ToolFailure {
    #[serde(flatten)]
    body: ErrorBody,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u64>,
}

impl ToolFailure {
    fn of(e: &EngineError) -> Self {
        Self {
            body: e.body(),
            retry_after: e.retry_after(),
        }
    }
}

/// The `/mcp` endpoint: stateless streamable HTTP, answering in JSON.
pub fn service(state: AppState) -> StreamableHttpService<TaskqTools, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .disable_allowed_hosts();
    config.sse_keep_alive = None;
    StreamableHttpService::new(
        move || {
            Ok(TaskqTools {
                state: state.clone(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
