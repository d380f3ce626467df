"""The suite runs against a real `taskq serve` named by TASKQ_URL, with its
operator token in TASKQ_ADMIN_TOKEN (tests/clients.rs starts one and runs
pytest here); without them every test errors instead of passing."""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import taskq  # noqa: E402


@dataclass
class Org:
    org_id: str
    key: str
    owner_email: str


@pytest.fixture(scope="session")
def url() -> str:
    value = os.environ.get("TASKQ_URL")
    if not value:
        raise RuntimeError("TASKQ_URL names no server: run this suite through tests/clients.rs")
    return value


@pytest.fixture(scope="session")
def admin(url: str) -> Iterator[taskq.Client]:
    token = os.environ.get("TASKQ_ADMIN_TOKEN")
    if not token:
        raise RuntimeError("TASKQ_ADMIN_TOKEN is unset")
    with taskq.Client(url, admin_token=token) as client:
        yield client


@pytest.fixture
def new_org(admin: taskq.Client) -> Callable[..., Org]:
    """Makes an org (limits lifted) and answers it with its owner's key."""

    def make(tier: str = "pro", encryption: str = "managed") -> Org:
        n = uuid.uuid4().hex[:10]
        created = admin.create_org(
            {"name": f"py-{n}", "owner_email": f"owner-{n}@example.com", "tier": tier, "encryption": encryption}
        )
        admin.patch_org(
            created["org_id"],
            {"limits": {"writes_per_minute": None, "reads_per_minute": None, "requests_per_month": None, "tasks_per_month": None}},
        )
        return Org(created["org_id"], created["owner"]["api_key"], created["owner"]["email"])

    return make


@pytest.fixture
def client(url: str, new_org: Callable[..., Org]) -> Iterator[taskq.Client]:
    org = new_org()
    with taskq.Client(url, org.key) as c:
        yield c
