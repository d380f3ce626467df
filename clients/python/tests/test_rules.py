"""The client's pure rules: when a call is sent again, how requests are
built, and what a handler's result becomes."""

from __future__ import annotations

import httpx
import pytest

import taskq
from taskq._operations import OPERATIONS
from taskq._outcome import MAX_NOTE_CHARS, completion, failure, release, renewal
from taskq._transport import (
    Operation,
    Route,
    Settings,
    build_url,
    owner_hint,
    query_string,
    request_timeout,
    retry_delay,
)

OP = Operation("remove_team_member", "DELETE", "/teams/{name}/members/{email}", auth="key", answer="empty")


@pytest.mark.parametrize(
    ("status", "headers", "wait"),
    [
        (429, {"retry-after": "3"}, 3.0),
        (429, {}, None),  # a monthly allowance: waiting changes nothing
        (503, {"retry-after": "1"}, 1.0),
        (503, {}, 0.5),
        (503, {"retry-after": "600"}, 30.0),
        (502, {}, 0.5),
        (500, {"retry-after": "1"}, None),
        (409, {}, None),
        (200, {}, None),
    ],
)
def test_retry_delay(status: int, headers: dict, wait: object) -> None:
    assert retry_delay(status, httpx.Headers(headers)) == wait


def test_urls_escape_path_parameters() -> None:
    settings = Settings("http://h:1/")
    url = build_url(settings, OP, ("a/b", "x+y@example.com"))
    assert url == "http://h:1/teams/a%2Fb/members/x%2By%40example.com"
    with pytest.raises(TypeError):
        build_url(settings, OP, ("only one",))


def test_query_strings_drop_unset_values_and_spell_booleans_as_the_server_reads_them() -> None:
    assert query_string({"full": True, "limit": 5, "cursor": None, "tags": ["a", "b"]}) == {
        "full": "true",
        "limit": "5",
        "tags": "a,b",
    }


def test_long_polls_get_their_wait_on_top_of_the_timeout() -> None:
    settings = Settings("http://h", timeout=10)
    claim = OPERATIONS["claim_task"]
    assert request_timeout(settings, claim, {"wait_seconds": 20}, None) == 30
    assert request_timeout(settings, claim, None, None) == 10
    # A wait for tasks that leaves out wait_seconds is held 30 s.
    wait = OPERATIONS["wait_for_tasks"]
    assert request_timeout(settings, wait, {"task_ids": []}, None) == 40
    assert request_timeout(settings, wait, {"task_ids": [], "wait_seconds": 5}, None) == 15


def test_outcomes() -> None:
    assert completion("t", "l", {"a": 1}) == {"task_id": "t", "lease_id": "l", "status": "completed", "note": "done", "output": {"a": 1}}
    assert completion("t", "l", None) == {"task_id": "t", "lease_id": "l", "status": "completed", "note": "done"}
    assert completion("t", "l", taskq.Done(None, "fine"))["note"] == "fine"
    wrong = completion("t", "l", 42)
    assert wrong["status"] == "failed" and wrong["note"].startswith("TypeError: the handler returned int")
    assert failure("t", "l", taskq.Fail("no", {"x": 1})) == {"task_id": "t", "lease_id": "l", "status": "failed", "note": "no", "output": {"x": 1}}
    long = failure("t", "l", RuntimeError("x" * 10_000))
    assert len(long["note"]) == MAX_NOTE_CHARS and long["note"].startswith("RuntimeError: xxx")
    assert failure("t", "l", KeyError())["note"] == "KeyError"
    assert release("t", "l") == {"task_id": "t", "lease_id": "l", "status": "pending", "note": "released by worker"}
    assert renewal("t", "l") == {"task_id": "t", "lease_id": "l"}


def test_a_repeated_create_is_answered_only_when_every_item_is_stored_with_its_title() -> None:
    from taskq._client import answer_from_existing, with_minted_ids

    body = with_minted_ids({"tasks": [{"title": "a", "ref": "x"}, {"title": "b", "task_id": "00000000-0000-4000-8000-000000000001"}]})
    first, second = (str(item["task_id"]) for item in body["tasks"])
    assert second == "00000000-0000-4000-8000-000000000001" and first != second
    stored = {
        "tasks": [
            {"task_id": first, "title": "a", "status": "pending", "created_at": "2026-01-01T00:00:00.000Z"},
            {"task_id": second, "title": "b", "status": "blocked", "created_at": "2026-01-01T00:00:00.000Z"},
        ],
        "count": 2,
        "not_found": [],
    }
    answer = answer_from_existing(body, stored)  # type: ignore[arg-type]
    assert answer == {
        "created": 2,
        "results": [
            {"ref": "x", "task_id": first, "status": "pending", "created_at": "2026-01-01T00:00:00.000Z"},
            {"ref": None, "task_id": second, "status": "blocked", "created_at": "2026-01-01T00:00:00.000Z"},
        ],
    }
    # Another title under the id: the 409 was someone else's.
    stored["tasks"][1]["title"] = "not b"
    assert answer_from_existing(body, stored) is None  # type: ignore[arg-type]
    # A missing item: the first attempt did not land.
    stored["tasks"] = stored["tasks"][:1]
    assert answer_from_existing(body, stored) is None  # type: ignore[arg-type]


def test_an_owner_hint_is_an_http_url_of_a_host() -> None:
    assert owner_hint("https://node-1.example:8443/") == "https://node-1.example:8443"
    for bad in (None, "", "node-1:8080", "ftp://node-1", "https://node-1/?a=1", "http:///x"):
        assert owner_hint(bad) is None, bad


def test_a_route_follows_the_owner_named_for_its_orgs_calls_only() -> None:
    operator = Operation("list_orgs", "GET", "/admin/orgs", auth="operator", answer="json")
    route = Route("http://balancer/")
    hint = httpx.Headers({"x-taskq-owner": "http://node-2:8080"})
    route.heard(operator, route.base_url, 200, hint)
    assert route.base_for(OP) == "http://balancer"
    route.heard(OP, route.base_url, 200, hint)
    assert (route.base_for(OP), route.base_for(operator)) == ("http://node-2:8080", "http://balancer")
    # A 503 from the owner (the org moved on) sends the next call back.
    route.heard(OP, "http://node-2:8080", 503, httpx.Headers({}))
    assert route.base_for(OP) == "http://balancer"
    # An owner that could not be reached is not followed again for a while.
    route.heard(OP, route.base_url, 200, hint)
    assert route.lost("http://node-2:8080") is True
    route.heard(OP, route.base_url, 200, hint)
    assert route.base_for(OP) == "http://balancer"
    assert route.lost("http://balancer") is False
