//! The MCP front end checked by a client nobody here wrote: the official
//! MCP Python SDK, over streamable HTTP (the newest protocol and the
//! initialize handshake of the ones before) and over the `taskq mcp` stdio
//! bridge. The SDK validates every message against the MCP schema.
//!
//! Runs when `TASKQ_TEST_MCP_PYTHON` names a Python with the `mcp` package
//! (`.ci/run` installs one); skipped with a note otherwise (a failure under
//! `TASKQ_TEST_REQUIRE_ALL=1`).

use crate::common::need;

const PYTHON_ENV: &str = "TASKQ_TEST_MCP_PYTHON";

backend_tests!(
    the_python_sdk_works_over_http_and_the_stdio_bridge,
    needs(
        "mcp_python",
        "needs TASKQ_TEST_MCP_PYTHON (a Python with the MCP SDK)"
    ),
    |srv| async move {
        let python = need(PYTHON_ENV);
        let org = srv.create_org("dev").await;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/mcp/client_check.py");
        let output = tokio::process::Command::new(&python)
            .arg(script)
            .arg(&srv.base_url)
            .arg(env!("CARGO_BIN_EXE_taskq"))
            .env("TASKQ_API_KEY", &org.owner_key)
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {python}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "the SDK check failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{stdout}");
        for (line, name) in lines.iter().zip(["http-auto", "http-legacy", "stdio"]) {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words[..2], [name, "ok"], "{stdout}");
            assert_eq!(words[3], "41", "tools listed: {stdout}");
        }
        // The newest version is negotiated where both sides know it.
        assert!(lines[0].contains("2026-07-28"), "{stdout}");
        assert!(lines[1].contains("2025-"), "{stdout}");

        // The tasks the SDK created went through the same engine.
        let done = srv.list_all(&org.owner_key, "status=completed").await;
        assert_eq!(done.len(), 3, "one task completed per connection");
    }
);
