"""Schemathesis hooks for taskq's fuzz run (tests/openapi.rs).

A claim may long-poll for up to 30 seconds (`wait_seconds`), and an empty
queue makes it wait that long on purpose. The run's request timeout is what
catches a hang, so a generated claim waits at most one second: a long poll
is not mistaken for a hang, and the run stays short. The waiting itself is
covered by tests/long_poll.rs. Values outside the schema are left alone, so
the server's validation of them is still fuzzed.
"""

import schemathesis

LONGEST_WAIT = 1


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path != "/tasks/claim" or not isinstance(case.body, dict):
        return
    wait = case.body.get("wait_seconds")
    if isinstance(wait, int) and not isinstance(wait, bool) and LONGEST_WAIT < wait <= 30:
        case.body["wait_seconds"] = LONGEST_WAIT
