"""Calls sent again: a create whose answer was lost leaves one task, and an
update whose answer was lost is reported in doubt instead of being sent
twice."""

from __future__ import annotations

import pytest

import taskq

from .proxy import DroppingProxy


def test_a_create_sent_again_after_a_dropped_connection_leaves_one_task(url: str, client: taskq.Client) -> None:
    proxy = DroppingProxy(url, b"POST /tasks ")
    try:
        through = taskq.Client(proxy.url, client.settings.api_key)
        created = through.create_tasks({"tasks": [{"title": "exactly one", "ref": "one"}, {"title": "and two"}]})
    finally:
        proxy.close()
    assert proxy.dropped == 1, "the proxy dropped no answer"
    assert created["created"] == 2
    assert [r["ref"] for r in created["results"]] == ["one", None]
    titles = sorted(t["title"] for t in client.list_tasks(limit=50)["tasks"])
    assert titles == ["and two", "exactly one"]
    ids = sorted(t["task_id"] for t in client.list_tasks(limit=50)["tasks"])
    assert sorted(r["task_id"] for r in created["results"]) == ids


def test_an_update_whose_answer_was_lost_is_in_doubt(url: str, client: taskq.Client) -> None:
    task_id = client.create_tasks({"tasks": [{"title": "t"}]})["results"][0]["task_id"]
    proxy = DroppingProxy(url, b"POST /tasks/update ")
    try:
        through = taskq.Client(proxy.url, client.settings.api_key)
        with pytest.raises(taskq.InDoubt):
            through.update_tasks({"updates": [{"task_id": task_id, "priority": 1}]})
    finally:
        proxy.close()
    # It was applied once, and the client did not send it again.
    assert client.get_tasks({"task_ids": [task_id]})["tasks"][0]["priority"] == 1
