// The worker against the real server: what a handler's result becomes, and
// a lost lease aborting the handler without the task being completed by
// the worker that lost it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Done, Fail, Worker, type WorkerEvent } from "../src/index.js";
import { newOrg, waitUntil, type Org } from "./helpers.js";

const quiet = { info: () => undefined, warn: () => undefined, error: console.error };

async function taskOf(org: Org, id: string) {
  const found = await org.client.get_tasks({ task_ids: [id] });
  const task = found.tasks[0];
  assert.ok(task, `task ${id} not found`);
  return task;
}

test("results become completions and failures", async () => {
  const org = await newOrg();
  const titles = ["plain", "none", "done", "fail", "throw"];
  const created = await org.client.create_tasks({ tasks: titles.map((title) => ({ title })) });
  const ids = new Map(titles.map((t, i) => [t, created.results[i]?.task_id as string]));
  const worker = new Worker({
    client: org.client,
    concurrency: 5,
    leaseSeconds: 30,
    waitSeconds: 1,
    handleSignals: false,
    logger: quiet,
    handler: async (task) => {
      switch (task.title) {
        case "plain":
          return { echo: "plain" };
        case "none":
          return undefined;
        case "done":
          return new Done({ n: 2 }, "all good");
        case "fail":
          throw new Fail("not today", { why: "asked" });
        default:
          throw new RangeError("bad input");
      }
    },
  });
  const running = worker.run();
  await waitUntil("every task is finished", async () =>
    (await org.client.list_tasks({ limit: 10 })).tasks.every((t) => t.status === "completed" || t.status === "failed"),
  );
  worker.stop();
  await running;
  const last = async (title: string) => (await taskOf(org, ids.get(title) as string)).history?.at(-1);
  assert.deepEqual([(await last("plain"))?.to_status, (await last("plain"))?.note], ["completed", "done"]);
  assert.deepEqual((await taskOf(org, ids.get("plain") as string)).output, { echo: "plain" });
  assert.equal((await last("none"))?.note, "done");
  assert.equal((await last("done"))?.note, "all good");
  assert.deepEqual((await taskOf(org, ids.get("done") as string)).output, { n: 2 });
  assert.deepEqual([(await last("fail"))?.to_status, (await last("fail"))?.note], ["failed", "not today"]);
  assert.deepEqual((await taskOf(org, ids.get("fail") as string)).output, { why: "asked" });
  assert.deepEqual([(await last("throw"))?.to_status, (await last("throw"))?.note], ["failed", "RangeError: bad input"]);
  const error = (await taskOf(org, ids.get("throw") as string)).output?.["error"] as { type: string; stack: string };
  assert.equal(error.type, "RangeError");
  assert.match(error.stack, /RangeError: bad input\n\s+at /);
});

test("a lost lease aborts the handler and the task stays with its new holder", async () => {
  const org = await newOrg();
  const taskId = (await org.client.create_tasks({ tasks: [{ title: "long" }] })).results[0]?.task_id as string;
  const events: WorkerEvent[] = [];
  let started = false;
  let aborted = false;
  const worker = new Worker({
    client: org.client,
    leaseSeconds: 3,
    waitSeconds: 1,
    handleSignals: false,
    logger: quiet,
    onEvent: (event) => events.push(event),
    handler: async (_task, job) => {
      started = true;
      await new Promise<void>((resolve) => job.signal.addEventListener("abort", () => resolve()));
      aborted = true;
      return { finished: true };
    },
  });
  const running = worker.run();
  await waitUntil("the handler runs", async () => started);
  // Another agent takes the task: it is given back and claimed again.
  await org.client.update_tasks({ updates: [{ task_id: taskId, status: "pending" }] });
  const claimed = await org.client.claim_task({ lease_seconds: 60 });
  assert.ok(claimed && "task_id" in claimed && claimed.task_id === taskId);
  await waitUntil("the handler is aborted", async () => aborted, 5_000);
  worker.stop();
  await running;
  const kinds = events.filter((e) => e.taskId === taskId).map((e) => e.kind);
  assert.equal(kinds[0], "claimed");
  assert.equal(kinds.at(-1), "lease_lost");
  assert.ok(!kinds.includes("completed"));
  const done = await org.client.update_tasks({
    updates: [{ task_id: taskId, lease_id: claimed.lease_id, status: "completed", note: "by the new holder" }],
  });
  assert.equal(done.updated, 1);
  const completions = (await taskOf(org, taskId)).history?.filter((e) => e.to_status === "completed") ?? [];
  assert.deepEqual(completions.map((e) => e.note), ["by the new holder"]);
});

test("a worker with tags claims only tasks that carry one", async () => {
  const org = await newOrg();
  await org.client.create_tags({ tags: [{ name: "ui" }, { name: "db" }] });
  const created = await org.client.create_tasks({
    tasks: [{ title: "db work", tags: ["db"] }, { title: "ui work", tags: ["ui"] }],
  });
  const [other, mine] = created.results.map((r) => r.task_id) as [string, string];
  const worker = new Worker({
    client: org.client,
    tags: ["ui"],
    concurrency: 2,
    waitSeconds: 1,
    handleSignals: false,
    logger: quiet,
    handler: () => ({ ok: true }),
  });
  const running = worker.run();
  await waitUntil("the ui task is completed", async () => (await taskOf(org, mine)).status === "completed");
  worker.stop();
  await running;
  // Both were pending when the worker claimed for two slots: it took only its tag.
  assert.deepEqual((await taskOf(org, other)).history?.map((e) => e.to_status), ["pending"]);
});
