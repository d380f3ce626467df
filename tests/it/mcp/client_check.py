"""Drives a running taskq server with the official MCP Python SDK.

Run by tests/mcp_sdk.rs. Over streamable HTTP (with the member's key as
X-Api-Key) and over the `taskq mcp` stdio bridge, it connects with the
SDK's own client (which validates every message against the MCP schema),
lists the tools, and runs a claim-work-complete loop plus failing calls
(whose error bodies come as structured content).
Prints one line per connection, `<name> ok <protocol version> <tool
count>`, and
exits non-zero with the reason on any failure.

Usage: client_check.py BASE_URL TASKQ_BINARY   (the key in TASKQ_API_KEY)
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

# Tools of features that exist; features not built yet must not be listed.
EXPECTED = {
    "create_tasks", "update_tasks", "get_tasks", "list_tasks", "claim_task",
    "list_tags", "create_tags", "update_tags", "delete_tags", "list_members",
    "update_member", "get_me", "update_me", "list_teams", "get_team",
    "create_team", "update_team", "delete_team", "add_team_member",
    "remove_team_member", "send_feedback", "get_quota", "search_tasks",
    "get_insights", "list_runbooks", "get_standup", "plan_tasks",
    "get_org_dek", "put_org_dek", "list_webhooks", "create_webhook",
    "delete_webhook", "rotate_webhook_secret", "list_webhook_deliveries",
    "test_webhook", "list_schedules", "create_schedule", "get_schedule",
    "update_schedule", "delete_schedule", "wait_for_tasks",
}


def body(result):
    """The route's JSON body a successful tool call carries as text."""
    if result.is_error:
        raise AssertionError(f"tool failed: {result.content}")
    return json.loads(result.content[0].text)


async def exercise(client, label):
    tools = await client.list_tools()
    names = {t.name for t in tools.tools}
    if names != EXPECTED:
        raise AssertionError(f"{label}: tools {sorted(names ^ EXPECTED)} differ")
    for t in tools.tools:
        if t.input_schema.get("type") != "object" or not t.description:
            raise AssertionError(f"{label}: {t.name} lacks an object schema or a description")

    title = f"written over {label}"
    created = body(await client.call_tool("create_tasks", {"tasks": [{"title": title, "tags": [label]}]}))
    task_id = created["results"][0]["task_id"]
    claimed = body(await client.call_tool("claim_task", {"tags": [label], "include_context": False}))
    if claimed["task_id"] != task_id or claimed["status"] != "in_progress":
        raise AssertionError(f"{label}: claimed {claimed}")
    updated = body(await client.call_tool("update_tasks", {"updates": [{
        "task_id": task_id, "lease_id": claimed["lease_id"], "status": "completed",
        "note": "done", "output": {"transport": label},
    }]}))
    if updated["updated"] != 1:
        raise AssertionError(f"{label}: update {updated}")
    fetched = body(await client.call_tool("get_tasks", {"task_ids": [task_id]}))
    task = fetched["tasks"][0]
    if task["status"] != "completed" or task["output"] != {"transport": label}:
        raise AssertionError(f"{label}: fetched {task}")
    waited = body(await client.call_tool("wait_for_tasks", {"task_ids": [task_id]}))
    if not waited["done"] or waited["tasks"][0]["status"] != "completed":
        raise AssertionError(f"{label}: a finished task's wait answered {waited}")

    empty = await client.call_tool("claim_task", {"tags": [label]})
    if empty.is_error or empty.content[0].text != "null":
        raise AssertionError(f"{label}: an empty queue answered {empty.content}")
    bad = await client.call_tool("claim_task", {"lease_seconds": 0})
    if not bad.is_error or "lease_seconds" not in bad.content[0].text:
        raise AssertionError(f"{label}: a bad lease was not refused: {bad.content}")
    # The text is the bare message; the route's whole error body rides
    # beside it as structured content.
    if bad.structured_content != {"error": bad.content[0].text}:
        raise AssertionError(f"{label}: a refusal's structured content: {bad.structured_content}")
    taken = await client.call_tool("create_tasks", {"tasks": [{"task_id": task_id, "title": title}]})
    expected = {"error": "task_id already exists", "task_id": task_id}
    if not taken.is_error or taken.content[0].text != expected["error"] or taken.structured_content != expected:
        raise AssertionError(f"{label}: a taken id answered {taken.content} {taken.structured_content}")
    return client.protocol_version, len(names)


async def over_http(base_url, key, mode):
    headers = {"X-Api-Key": key}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            return await exercise(client, f"http-{mode}")


async def over_bridge(base_url, binary):
    params = StdioServerParameters(
        command=binary,
        args=["mcp", "--url", base_url, "--api-key-env", "TASKQ_API_KEY"],
        env={"TASKQ_API_KEY": os.environ["TASKQ_API_KEY"], "PATH": os.environ.get("PATH", "")},
    )
    async with Client(params) as client:
        return await exercise(client, "stdio")


async def main():
    base_url, binary = sys.argv[1], sys.argv[2]
    key = os.environ["TASKQ_API_KEY"]
    # The newest protocol (probed with server/discover), then the
    # initialize handshake of the versions before it.
    for mode in ("auto", "legacy"):
        version, count = await over_http(base_url, key, mode)
        print(f"http-{mode} ok {version} {count}", flush=True)
    version, count = await over_bridge(base_url, binary)
    print(f"stdio ok {version} {count}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
