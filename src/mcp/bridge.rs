//! `taskq mcp`: a stdio bridge for MCP clients that only launch local
//! processes. It is an MCP server on stdin/stdout whose tools are those of a
//! running taskq server, reached as an MCP client over streamable HTTP(S)
//! with the member's key. Both sides are rmcp; the bridge only relays
//! `tools/list` and `tools/call`.

use std::collections::HashMap;

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ResultType,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

use crate::outbound::{self, Proxies};

/// Relays tools to the upstream server.
struct Bridge {
    upstream: Peer<RoleClient>,
}

fn upstream_failed(e: rmcp::service::ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("the taskq server did not answer: {e}"), None)
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = super::implementation();
        if let Some(upstream) = self.upstream.peer_info() {
            if let Some(server) = upstream.server_info.clone() {
                info.server_info = server;
            }
            info.instructions = upstream.instructions.clone();
        }
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self
            .upstream
            .list_tools(request)
            .await
            .map_err(upstream_failed)?;
        // The upstream's answer is shaped for the version it negotiated; our
        // client may have negotiated a newer one, which needs the type.
        tools.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(tools)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut result = self
            .upstream
            .call_tool(request)
            .await
            .map_err(upstream_failed)?;
        result.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(result.into())
    }
}

/// Connects to the server at `url` with `api_key`, then serves MCP on
/// stdin/stdout until the client closes it.
pub async fn run(url: &str, api_key: &str) -> anyhow::Result<()> {
    let endpoint = format!("{}/mcp", url.trim_end_matches('/'));
    let headers = HashMap::from([(
        axum::http::HeaderName::from_static("x-api-key"),
        axum::http::HeaderValue::from_str(api_key)
            .context("the API key is not a valid header value")?,
    )]);
    let config =
        StreamableHttpClientTransportConfig::with_uri(endpoint.clone()).custom_headers(headers);
    outbound::check_tls(url)?;
    let client = outbound::client_builder(Proxies::FromEnvironment).build()?;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let upstream: RunningService<RoleClient, ()> = ()
        .serve(transport)
        .await
        .with_context(|| format!("connecting to {endpoint}"))?;
    let bridge = Bridge {
        upstream: upstream.peer().clone(),
    };
    let server = bridge
        .serve(rmcp::transport::stdio())
        .await
        .context("starting MCP on stdin/stdout")?;
    server.waiting().await?;
    let _ = upstream.cancel().await;
    Ok(())
}
