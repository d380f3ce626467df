"""Going to the org's owner node: a client follows the owner that an answer
forwarded through another node names (`X-Taskq-Owner`), and leaves an
owner it cannot reach for the base URL, which still answers."""

from __future__ import annotations

import asyncio

import taskq

from .proxy import ClosingListener, HintingProxy


def test_the_client_sends_its_orgs_calls_to_the_owner_an_answer_names(url: str, client: taskq.Client) -> None:
    proxy = HintingProxy(url, owner=url)
    try:
        with taskq.Client(proxy.url, client.settings.api_key) as through:
            through.list_tasks(limit=1)
            created = through.create_tasks({"tasks": [{"title": "sent to the owner"}]})
            task_id = created["results"][0]["task_id"]
            got = through.get_tasks({"task_ids": [task_id]})
    finally:
        proxy.close()
    assert got["tasks"][0]["title"] == "sent to the owner"
    assert proxy.requests == 1, "only the first call went through the balancer"


def test_the_async_client_follows_the_owner_too(url: str, client: taskq.Client) -> None:
    proxy = HintingProxy(url, owner=url)

    async def calls() -> None:
        async with taskq.AsyncClient(proxy.url, client.settings.api_key) as through:
            for _ in range(3):
                await through.list_tasks(limit=1)

    try:
        asyncio.run(calls())
    finally:
        proxy.close()
    assert proxy.requests == 1


def test_an_owner_out_of_reach_is_left_for_the_base_url(url: str, client: taskq.Client) -> None:
    unreachable = ClosingListener()
    proxy = HintingProxy(url, owner=unreachable.url)
    try:
        with taskq.Client(proxy.url, client.settings.api_key) as through:
            answers = [through.list_tasks(limit=1) for _ in range(3)]
    finally:
        proxy.close()
        unreachable.close()
    assert all("tasks" in a for a in answers)
    # The owner was tried once; the calls after went to the base URL.
    assert unreachable.accepted == 1
    assert proxy.requests == 3


def test_a_call_broken_at_the_owner_is_sent_again_through_the_base_url(url: str, client: taskq.Client) -> None:
    # As the node in front would have answered 503 had it forwarded the
    # call to an owner that died: an update, not repeatable, is not left in
    # doubt but sent again where the org is served.
    task_id = client.create_tasks({"tasks": [{"title": "t"}]})["results"][0]["task_id"]
    unreachable = ClosingListener()
    proxy = HintingProxy(url, owner=unreachable.url)
    try:
        with taskq.Client(proxy.url, client.settings.api_key) as through:
            through.list_tasks(limit=1)
            through.update_tasks({"updates": [{"task_id": task_id, "priority": 3}]})
    finally:
        proxy.close()
        unreachable.close()
    assert unreachable.accepted == 1
    assert client.get_tasks({"task_ids": [task_id]})["tasks"][0]["priority"] == 3
