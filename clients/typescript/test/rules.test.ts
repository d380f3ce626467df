// The client's pure rules: when a call is sent again, how requests are
// built, and what a handler's result becomes.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Done, Fail } from "../src/index.js";
import { completion, failure, MAX_NOTE_CHARS, release, renewal } from "../src/outcome.js";
import { OPERATIONS } from "../src/operations.js";
import {
  buildUrl,
  ownerHint,
  queryString,
  retryDelayMs,
  Route,
  SHUN_FOR_MS,
  waitSeconds,
  type OperationSpec,
} from "../src/transport.js";

test("retry delays", () => {
  const cases: [number, Record<string, string>, number | undefined][] = [
    [429, { "retry-after": "3" }, 3000],
    [429, {}, undefined],
    [503, { "retry-after": "1" }, 1000],
    [503, {}, 500],
    [503, { "retry-after": "600" }, 30000],
    [502, {}, 500],
    [500, { "retry-after": "1" }, undefined],
    [409, {}, undefined],
    [200, {}, undefined],
  ];
  for (const [status, headers, wait] of cases) {
    assert.equal(retryDelayMs(status, new Headers(headers)), wait, `${status} ${JSON.stringify(headers)}`);
  }
});

test("urls escape path parameters and queries drop unset values", () => {
  const op: OperationSpec = { id: "remove_team_member", method: "DELETE", path: "/teams/{name}/members/{email}", auth: "key", answer: "empty" };
  assert.equal(buildUrl("http://h:1/", op, ["a/b", "x+y@example.com"]), "http://h:1/teams/a%2Fb/members/x%2By%40example.com");
  assert.throws(() => buildUrl("http://h:1", op, ["one"]), TypeError);
  assert.equal(queryString({ full: true, limit: 5, cursor: undefined, tags: ["a", "b"] }), "?full=true&limit=5&tags=a%2Cb");
  assert.equal(queryString(undefined), "");
});

test("long polls get their wait on top of the timeout", () => {
  assert.equal(waitSeconds(OPERATIONS.claim_task, { wait_seconds: 20 }, undefined), 20);
  assert.equal(waitSeconds(OPERATIONS.claim_task, undefined, undefined), 0);
  // A wait for tasks that leaves out wait_seconds is held 30 s.
  assert.equal(waitSeconds(OPERATIONS.wait_for_tasks, { task_ids: [] }, undefined), 30);
  assert.equal(waitSeconds(OPERATIONS.wait_for_tasks, { task_ids: [], wait_seconds: 5 }, undefined), 5);
});

test("outcomes", () => {
  assert.deepEqual(completion("t", "l", { a: 1 }), { task_id: "t", lease_id: "l", status: "completed", note: "done", output: { a: 1 } });
  assert.deepEqual(completion("t", "l", undefined), { task_id: "t", lease_id: "l", status: "completed", note: "done" });
  assert.equal(completion("t", "l", new Done(undefined, "fine")).note, "fine");
  const wrong = completion("t", "l", 42);
  assert.equal(wrong.status, "failed");
  assert.match(wrong.note as string, /^TypeError: the handler resolved with number/);
  assert.deepEqual(failure("t", "l", new Fail("no", { x: 1 })), { task_id: "t", lease_id: "l", status: "failed", note: "no", output: { x: 1 } });
  const long = failure("t", "l", new Error("x".repeat(10_000)));
  assert.equal((long.note as string).length, MAX_NOTE_CHARS);
  assert.deepEqual(release("t", "l"), { task_id: "t", lease_id: "l", status: "pending", note: "released by worker" });
  assert.deepEqual(renewal("t", "l"), { task_id: "t", lease_id: "l" });
});

test("a repeated create is answered only when every item is stored with its title", async () => {
  const { answerFromExisting, withMintedIds } = await import("../src/client.js");
  const body = await withMintedIds({ tasks: [{ title: "a", ref: "x" }, { title: "b", task_id: "00000000-0000-4000-8000-000000000001" }] });
  const [first, second] = body.tasks.map((t) => t.task_id as string) as [string, string];
  assert.equal(second, "00000000-0000-4000-8000-000000000001");
  assert.notEqual(first, second);
  const at = "2026-01-01T00:00:00.000Z";
  const task = (id: string, title: string, status: "pending" | "blocked") =>
    ({ task_id: id, title, status, created_at: at }) as unknown as import("../src/schema.js").GetAnswer["tasks"][number];
  const stored = { tasks: [task(first, "a", "pending"), task(second, "b", "blocked")], count: 2, not_found: [] };
  assert.deepEqual(answerFromExisting(body, stored), {
    created: 2,
    results: [
      { ref: "x", task_id: first, status: "pending", created_at: at },
      { ref: null, task_id: second, status: "blocked", created_at: at },
    ],
  });
  assert.equal(answerFromExisting(body, { ...stored, tasks: [task(first, "a", "pending"), task(second, "not b", "blocked")] }), undefined);
  assert.equal(answerFromExisting(body, { ...stored, tasks: [task(first, "a", "pending")] }), undefined);
});

test("an owner hint is an http URL of a host", () => {
  assert.equal(ownerHint("https://node-1.example:8443/"), "https://node-1.example:8443");
  for (const bad of [null, "", "node-1:8080", "ftp://node-1", "https://node-1/?a=1", "https://node-1/#x"]) {
    assert.equal(ownerHint(bad), undefined, String(bad));
  }
});

test("a route follows the owner named for its org's calls only", () => {
  const member: OperationSpec = { id: "list_tasks", method: "GET", path: "/tasks", auth: "key", answer: "json" };
  const operator: OperationSpec = { id: "list_orgs", method: "GET", path: "/admin/orgs", auth: "operator", answer: "json" };
  const route = new Route("http://balancer/");
  const hint = new Headers({ "x-taskq-owner": "http://node-2:8080" });
  route.heard(operator, route.baseUrl, 200, hint);
  assert.equal(route.baseFor(member), "http://balancer");
  route.heard(member, route.baseUrl, 200, hint);
  assert.deepEqual([route.baseFor(member), route.baseFor(operator)], ["http://node-2:8080", "http://balancer"]);
  // A 503 from the owner (the org moved on) sends the next call back.
  route.heard(member, "http://node-2:8080", 503, new Headers());
  assert.equal(route.baseFor(member), "http://balancer");
  // An owner that could not be reached is not followed again for a while.
  route.heard(member, route.baseUrl, 200, hint, 0);
  assert.equal(route.lost("http://node-2:8080", 0), true);
  route.heard(member, route.baseUrl, 200, hint, SHUN_FOR_MS - 1);
  assert.equal(route.baseFor(member), "http://balancer");
  route.heard(member, route.baseUrl, 200, hint, SHUN_FOR_MS);
  assert.equal(route.baseFor(member), "http://node-2:8080");
  assert.equal(route.lost("http://balancer"), false);
});
