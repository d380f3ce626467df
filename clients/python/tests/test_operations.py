"""Every operation of the generated client, called against the real server,
with its answer checked; the last assertion proves none was left out."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from typing import Any, Set, Tuple

import pytest

import taskq
from taskq._operations import OPERATIONS
from taskq._transport import Operation

CALLED: Set[str] = set()


class Recording(taskq.Client):
    def _invoke(self, operation: Operation, path: Tuple[str, ...] = (), body: Any = None, query: Any = None, retry_in_doubt: bool = False) -> Any:
        CALLED.add(operation.id)
        return super()._invoke(operation, path, body, query, retry_in_doubt)


def test_every_operation_round_trips(url: str) -> None:
    admin = Recording(url, admin_token=os.environ["TASKQ_ADMIN_TOKEN"])
    service_and_operator(admin)
    n = uuid.uuid4().hex[:8]
    org = admin.create_org({"name": f"tour-{n}", "owner_email": f"owner-{n}@example.com", "tier": "pro"})
    assert org["tier"] == "pro" and org["owner"]["role"] == "owner"
    patched = admin.patch_org(org["org_id"], {"limits": {"writes_per_minute": None, "reads_per_minute": None}})
    assert patched["org_id"] == org["org_id"]
    shown = admin.get_org(org["org_id"])
    assert "deleting" not in shown and shown["name"] == f"tour-{n}"
    owner = Recording(url, org["owner"]["api_key"])
    member_email = f"member-{n}@example.com"
    added = admin.add_member(org["org_id"], {"email": member_email, "role": "user"})
    assert added["email"] == member_email and added["role"] == "user"
    reset = admin.reset_key(org["org_id"], member_email, {"key_name": "reset"})
    assert reset["key_name"] == "reset"
    member = Recording(url, reset["api_key"])
    assert member.get_me()["email"] == member_email
    # Lifting a block the member does not have is refused, and says so.
    with pytest.raises(taskq.ApiError) as not_blocked:
        admin.unblock_member({"email": member_email})
    assert not_blocked.value.status == 404 and "not blocked" in not_blocked.value.error

    tasks_round_trip(owner)
    reports(admin, owner, org["org_id"])
    tags_members_teams(admin, owner, org["org_id"], member_email)
    webhooks(owner)
    schedules(owner)
    keys(owner)
    org_keys(admin, url, owner)

    rotated = admin.rotate_master_key({"new_key": base64.b64encode(os.urandom(32)).decode()})
    assert rotated["rewrapped"] >= 1
    # The server goes on serving with the new key.
    assert owner.get_quota()["tier"] == "pro"

    exported = [json.loads(line) for line in admin.export_org(org["org_id"]).splitlines()]
    assert exported[0]["kind"] == "org" and exported[0]["org_id"] == org["org_id"]
    doomed = admin.create_org({"name": f"doomed-{n}", "owner_email": f"doomed-{n}@example.com"})
    assert admin.delete_org(doomed["org_id"]) == {"org_id": doomed["org_id"], "deleting": True}

    missing = set(OPERATIONS) - CALLED
    assert not missing, f"operations never called: {sorted(missing)}"


def service_and_operator(admin: taskq.Client) -> None:
    assert admin.health() == {"status": "ok"}
    document = admin.openapi()
    assert document["openapi"] == "3.1.0"
    assert "/tasks/claim" in document["paths"]
    assert "taskq_http_requests_total" in admin.metrics()
    feedback = admin.feedback_org()
    assert uuid.UUID(feedback["org_id"])
    assert isinstance(admin.cluster()["nodes"], list)
    assert isinstance(admin.operator_stats()["orgs"], list)


def tasks_round_trip(owner: taskq.Client) -> None:
    created = owner.create_tasks(
        {"tasks": [{"title": "write", "ref": "w", "priority": 1}, {"title": "review", "blocked_by": ["ref:w"]}]}
    )
    assert created["created"] == 2
    first, second = (r["task_id"] for r in created["results"])
    assert [r["status"] for r in created["results"]] == ["pending", "blocked"]
    listed = owner.list_tasks(status="blocked", limit=10)
    assert [t["task_id"] for t in listed["tasks"]] == [second]
    claimed = owner.claim_task({"lease_seconds": 30})
    assert claimed is not None and "task_id" in claimed
    assert claimed["task_id"] == first and claimed["status"] == "in_progress"
    updated = owner.update_tasks(
        {"updates": [{"task_id": first, "lease_id": claimed["lease_id"], "status": "completed", "note": "done", "output": {"n": 1}}]}
    )
    assert updated["updated"] == 1 and updated["results"][0]["status"] == "completed"
    got = owner.get_tasks({"task_ids": [first]})
    assert got["count"] == 1 and got["tasks"][0]["output"] == {"n": 1}
    assert [e["to_status"] for e in got["tasks"][0]["history"]] == ["pending", "in_progress", "completed"]
    assert owner.get_tasks({"task_ids": [second]})["tasks"][0]["status"] == "pending"
    missing = str(uuid.uuid4())
    waited = owner.wait_for_tasks({"task_ids": [first, second, missing], "until": "any", "wait_seconds": 0})
    assert waited["done"] is True and waited["not_found"] == [missing]
    assert [(t["task_id"], t["status"]) for t in waited["tasks"]] == [(first, "completed"), (second, "pending")]
    assert owner.wait_for_tasks({"task_ids": [second], "wait_seconds": 0})["done"] is False
    search = owner.search_tasks({"query": "write"})
    assert search == {"available": False, "reason": "not_configured"}
    plan = owner.plan_tasks({"goal": "ship it"})
    assert plan.get("available") is False


def reports(admin: taskq.Client, owner: taskq.Client, org_id: str) -> None:
    computed = admin.recompute_reports(org_id, {"reports": ["insights", "standup"]})
    assert set(computed["computed"]) >= {"insights"}
    insights = owner.get_insights()
    assert insights.get("available") is True and "throughput" in insights
    assert "available" in owner.list_runbooks() or "runbooks" in owner.list_runbooks()
    standup = owner.get_standup(scope="org", cadence="daily")
    assert "available" in standup or "headline" in standup
    quota = owner.get_quota()
    assert quota["tier"] == "pro" and quota["used"] >= 2
    filed = owner.send_feedback({"message": "the client works", "type": "general"})
    assert uuid.UUID(filed["task_id"])


def tags_members_teams(admin: taskq.Client, owner: taskq.Client, org_id: str, member_email: str) -> None:
    made = owner.create_tags({"tags": [{"name": "ui"}, {"name": "db", "default": True}]})
    assert made["created"] == 2
    assert sorted(t["name"] for t in owner.list_tags()) == ["db", "ui"]
    changed = owner.update_tags({"tags": [{"name": "ui", "description": "the front end"}]})
    assert changed["tags"][0]["description"] == "the front end"
    patched = owner.update_member(member_email, {"profile_tags": ["ui"]})
    assert patched["profile_tags"] == ["ui"]
    assert any(m["email"] == member_email for m in owner.list_members())
    me = owner.update_me({"profile_tags": ["db"]})
    assert me["profile_tags"] == ["db"]
    team = owner.create_team({"name": "web", "tags": ["ui"]})
    assert team["name"] == "web" and team["tags"] == ["ui"]
    joined = owner.add_team_member("web", {"email": member_email})
    assert joined["email"] == member_email and joined["sources"] == ["manual"]
    assert [m["email"] for m in owner.get_team("web")["members"]] == [member_email]
    assert owner.update_team("web", {"description": "web people"})["description"] == "web people"
    assert [t["name"] for t in owner.list_teams()] == ["web"]
    owner.remove_team_member("web", member_email)
    assert owner.get_team("web")["members"] == []
    admin.set_idp(org_id, {"enrolled": True})
    synced = admin.idp_sync(org_id, {"teams": {"web": [member_email]}})
    assert (synced["added"], synced["removed"]) == (1, 0)
    assert owner.get_team("web")["members"][0]["sources"] == ["idp"]
    owner.delete_team("web")
    assert owner.list_teams() == []
    deleted = owner.delete_tags({"names": ["ui"]})
    assert deleted["deleted"] == ["ui"] and deleted["count"] == 1


def webhooks(owner: taskq.Client) -> None:
    made = owner.create_webhook({"url": "http://127.0.0.1:9/hook", "events": ["task.completed"]})
    assert made["secret"].startswith("whsec_") and made["active"] is True
    hook = made["webhook_id"]
    assert [w["webhook_id"] for w in owner.list_webhooks()["webhooks"]] == [hook]
    assert owner.rotate_webhook_secret(hook)["secret"] != made["secret"]
    assert owner.test_webhook(hook)["event_id"]
    assert isinstance(owner.list_webhook_deliveries(hook)["deliveries"], list)
    owner.delete_webhook(hook)
    assert owner.list_webhooks()["webhooks"] == []


def schedules(owner: taskq.Client) -> None:
    made = owner.create_schedule({"name": "nightly", "cron": "0 2 * * *", "timezone": "Europe/Berlin", "task": {"title": "Audit"}})
    assert made["active"] is True and made["next_run_at"] and made["last_run_at"] is None
    sid = made["schedule_id"]
    assert [s["schedule_id"] for s in owner.list_schedules()["schedules"]] == [sid]
    assert owner.get_schedule(sid)["cron"] == "0 2 * * *"
    paused = owner.update_schedule(sid, {"active": False})
    assert paused["active"] is False and paused["next_run_at"] is None
    owner.delete_schedule(sid)
    with pytest.raises(taskq.ApiError) as gone:
        owner.get_schedule(sid)
    assert gone.value.status == 404 and gone.value.error == "schedule not found"


def keys(owner: taskq.Client) -> None:
    made = owner.create_key({"name": "spare"})
    assert made["name"] == "spare" and made["api_key"]
    listed = owner.list_keys()["keys"]
    assert any(k["key_id"] == made["key_id"] and k["active"] for k in listed)
    owner.revoke_key(made["key_id"])
    spare = taskq.Client(owner.settings.base_url, made["api_key"])
    with pytest.raises(taskq.ApiError) as refused:
        spare.get_me()
    assert refused.value.status == 401 and refused.value.error == "invalid api key"


def org_keys(admin: taskq.Client, url: str, owner: taskq.Client) -> None:
    with pytest.raises(taskq.ApiError) as managed:
        owner.get_org_dek()
    assert managed.value.status == 409 and managed.value.body["key_provider"] == "managed"
    n = uuid.uuid4().hex[:8]
    byok = admin.create_org({"name": f"byok-{n}", "owner_email": f"o-{n}@example.com", "encryption": "byok"})
    client = Recording(url, byok["owner"]["api_key"])
    wrapped = base64.b64encode(os.urandom(48)).decode()
    created = client.put_org_dek({"wrapped_dek": wrapped, "kms_key_id": "kms://key/1"})
    assert created == {"status": "created", "org_id": byok["org_id"]}
    dek = client.get_org_dek()
    assert dek["wrapped_dek"] == wrapped and dek["kms_key_id"] == "kms://key/1"


def test_the_async_client_answers_as_the_sync_one(url: str, new_org: Any) -> None:
    org = new_org()

    async def tour() -> None:
        async with taskq.AsyncClient(url, org.key) as client:
            created = await client.create_tasks({"tasks": [{"title": "async"}]})
            task_id = created["results"][0]["task_id"]
            claimed = await client.claim_task({"count": 5, "lease_seconds": 30})
            assert claimed is not None and "tasks" in claimed
            assert [t["task_id"] for t in claimed["tasks"]] == [task_id]
            me = await client.get_me()
            assert me["email"] == org.owner_email
            with pytest.raises(taskq.ApiError) as missing:
                await client.get_team("nobody")
            assert missing.value.status == 404

    asyncio.run(tour())


def test_creates_carry_client_minted_ids(client: taskq.Client) -> None:
    created = client.create_tasks({"tasks": [{"title": "a"}, {"title": "b", "task_id": str(uuid.uuid4())}]})
    ids = [r["task_id"] for r in created["results"]]
    assert all(uuid.UUID(i).version == 4 for i in ids)
    # A server-assigned id would be a v7: the client minted the first.
    with pytest.raises(taskq.ApiError) as again:
        client.create_tasks({"tasks": [{"title": "a", "task_id": ids[0]}]})
    assert again.value.status == 409 and again.value.body["task_id"] == ids[0]
