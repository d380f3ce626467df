"""Schemathesis hooks for taskq's fuzz run (tests/openapi.rs).

Long polls. A claim may long-poll for up to 30 seconds (`wait_seconds`),
and an empty queue makes it wait that long on purpose; a wait for tasks
(`POST /tasks/wait`) waits 30 seconds unless told otherwise. The run's
request timeout is what catches a hang, so a generated claim or wait
waits at most one second: a long poll is not mistaken for a hang, and the
run stays short. The waiting itself is covered by tests/long_poll.rs and
tests/wait.rs.

The exceptions. Every rule of a request's shape is in the document, so a
request the document allows is accepted; three kinds of rule cannot be
stated in a JSON Schema, and a request the fuzzer generates as valid is
brought within them before it is sent:

1. What the org's state decides, or the world's: tags of its vocabulary (task tags,
   profile and team tags), the teams and members of an identity-provider
   sync, team members and assignees (members and keys), blocking and parent tasks, the
   list cursor the server minted, client envelopes (only a BYOK org takes
   them), a seat (an owner keeps theirs), and a webhook's URL (its host
   must resolve, to an address the server allows). A generated value becomes
   one the state admits, or is left out.
2. Rules across the items of one call: names and ids unique (JSON
   Schema's `uniqueItems` compares whole items, not one field of each),
   and `ref:` blockers that name another item without forming a cycle.
   A generated batch keeps the first of each name and only the `ref:`s
   to earlier items.
3. A standup period of the cadence asked for, and one the calendar has
   (`2023-02-29`): two query parameters that must agree, and a calendar.
4. Rules across the fields of one object, and grammars and registries: a
   retry policy's `max_backoff_seconds` at least its `backoff_seconds`; a
   schedule's `cron` a pattern that can match (`0 0 31 2 *` never does)
   and its `timezone` a name of the IANA database. A generated pattern
   becomes `0 2 * * *` and a zone `Europe/Berlin`; a schedule's task is
   brought within the state as a create item is.

Requests generated as invalid are sent as they are, so the server's
refusals are still fuzzed.
"""

import datetime
import re

import schemathesis

LONGEST_WAIT = 1
# What tests/openapi.rs creates before the run.
TAG = "backend"
TEAM = "core"
MEMBER = "member@example.com"
# Where generated webhook endpoints point: a loopback port nothing answers
# on (the run allows private addresses), not a host the fuzzer made up.
WEBHOOK_URL = "http://127.0.0.1:9/hook"
CRON = "0 2 * * *"
ZONE = "Europe/Berlin"


def positive(case, location):
    """Whether `location` of the case was generated as valid data."""
    component = case.meta.components.get(location) if case.meta else None
    mode = component.mode if component else (case.meta.generation.mode if case.meta else None)
    return mode is not None and str(getattr(mode, "value", mode)) == "positive"


def cadence_of(period):
    """The cadence of a period the calendar has, or None.

    The server's calendar is ISO 8601's, which has a year 0000; Python's
    starts at year 1. The Gregorian calendar repeats every 400 years, its
    ISO weeks too (146,097 days are 20,871 weeks), so year 0000 is checked
    as year 0400.
    """
    try:
        year = int(period[:4]) or 400
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", period):
            datetime.date(year, int(period[5:7]), int(period[8:]))
            return "daily"
        if re.fullmatch(r"\d{4}-W\d{2}", period):
            datetime.date.fromisocalendar(year, int(period[6:]), 1)
            return "weekly"
        if re.fullmatch(r"\d{4}-\d{2}", period):
            datetime.date(year, int(period[5:]), 1)
            return "monthly"
    except (TypeError, ValueError):
        return None
    return None


ENVELOPE = "__service_enc__"
CONTENT = ("title", "description", "note")
OBJECTS = ("metadata", "output")


def plain_content(body):
    """Client envelopes in a create or an update made plain."""
    for item in body.get("tasks") or body.get("updates") or []:
        if not isinstance(item, dict):
            continue
        for key in CONTENT:
            if isinstance(item.get(key), dict):
                item[key] = "plain"
        for key in OBJECTS:
            if isinstance(item.get(key), dict) and ENVELOPE in item[key]:
                item[key] = {}


def known_tags(value):
    return [TAG] if isinstance(value, list) and value else value


def within_retry(item):
    """A retry policy whose cap is at least its first wait."""
    retry = item.get("retry")
    if not isinstance(retry, dict):
        return
    first, cap = retry.get("backoff_seconds", 30), retry.get("max_backoff_seconds")
    numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (first, cap))
    if numbers and cap < first:
        retry["max_backoff_seconds"] = first


def within_item(task):
    """A create item (or a schedule's task) brought within the org's state."""
    if "tags" in task:
        task["tags"] = known_tags(task["tags"])
    if task.get("assignee") is not None:
        task["assignee"] = MEMBER
    task.pop("parent_task_id", None)
    within_retry(task)


def within_schedule(body):
    if "cron" in body:
        body["cron"] = CRON
    if "timezone" in body:
        body["timezone"] = ZONE
    if isinstance(body.get("task"), dict):
        within_item(body["task"])
        plain_content({"tasks": [body["task"]]})


def within_state(case):
    path, body = case.operation.path, case.body
    if isinstance(body, dict) and positive(case, "body"):
        if path == "/tasks":
            refs, ids = [], set()
            for task in body.get("tasks") or []:
                if isinstance(task, dict):
                    within_item(task)
                    task["blocked_by"] = [
                        b for b in task.get("blocked_by") or [] if b[4:] in refs
                    ]
                    if task.get("ref") in refs:
                        task.pop("ref")
                    if task.get("ref") is not None:
                        refs.append(task["ref"])
                    if task.get("task_id") in ids:
                        task.pop("task_id")
                    if task.get("task_id") is not None:
                        ids.add(task["task_id"])
        if path == "/tasks/update":
            for update in body.get("updates") or []:
                if isinstance(update, dict):
                    if "tags" in update:
                        update["tags"] = known_tags(update["tags"])
                    if update.get("assignee") is not None:
                        update["assignee"] = MEMBER
                    update.pop("blocked_by", None)
        if path in ("/me", "/members/{email}") and "profile_tags" in body:
            body["profile_tags"] = known_tags(body["profile_tags"])
        if path == "/teams/{name}/members" and "email" in body:
            body["email"] = MEMBER
        if path == "/members/{email}" and body.get("seated") is False:
            body["seated"] = True
        if path in ("/tasks", "/tasks/update"):
            plain_content(body)
        if path in ("/schedules", "/schedules/{schedule_id}"):
            within_schedule(body)
        if path == "/webhooks" and "url" in body:
            body["url"] = WEBHOOK_URL
        if path in ("/teams", "/teams/{name}") and "tags" in body:
            body["tags"] = known_tags(body["tags"])
        if path.endswith("/idp/sync") and isinstance(body.get("teams"), dict):
            body["teams"] = {TEAM: [MEMBER] if any(body["teams"].values()) else []}
        if path in ("/tags", "/tags/update") and isinstance(body.get("tags"), list):
            seen, unique = set(), []
            for tag in body["tags"]:
                name = tag.get("name", "").strip() if isinstance(tag, dict) else None
                if name not in seen:
                    seen.add(name)
                    unique.append(tag)
            body["tags"] = unique
    query = case.query
    if isinstance(query, dict) and positive(case, "query"):
        if path == "/tasks":
            query.pop("cursor", None)
        if path == "/standup" and "period" in query:
            cadence = cadence_of(query["period"])
            if cadence:
                query["cadence"] = cadence
            else:
                query.pop("period")


@schemathesis.hook
def before_call(context, case, kwargs):
    within_state(case)
    if case.operation.path not in ("/tasks/claim", "/tasks/wait") or not isinstance(case.body, dict):
        return
    if case.operation.path == "/tasks/wait" and "wait_seconds" not in case.body:
        case.body["wait_seconds"] = LONGEST_WAIT
    wait = case.body.get("wait_seconds")
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and LONGEST_WAIT < wait <= 30:
        case.body["wait_seconds"] = LONGEST_WAIT
