// Waiting for tasks and the event stream, against the real server: a wait
// released by another call's completion, events in order and live, a
// stream resumed after its last event, and one whose connections are cut
// mid-way read on without a gap or a repeat.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError, Client, type StreamEvent } from "../src/index.js";
import { admin, newOrg, serverUrl, waitUntil } from "./helpers.js";
import { StreamCuttingProxy } from "./proxy.js";

/** Iterates `events` until `count` came (then stops), while the test acts
 * and waits for what it expects. */
class Reader {
  readonly events: StreamEvent[] = [];
  private error: unknown;
  private done = false;
  private wake: (() => void)[] = [];
  private readonly finished: Promise<void>;

  constructor(events: AsyncIterable<StreamEvent>, private readonly count: number) {
    this.finished = (async () => {
      try {
        for await (const event of events) {
          this.events.push(event);
          this.notify();
          if (this.events.length === count) break;
        }
      } catch (error) {
        this.error = error;
      } finally {
        this.done = true;
        this.notify();
      }
    })();
  }

  private notify(): void {
    for (const wake of this.wake.splice(0)) wake();
  }

  async waitFor(n: number, timeoutMs = 30_000): Promise<StreamEvent[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.events.length < n && !this.done && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.wake.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    if (this.error !== undefined) throw this.error;
    assert.ok(this.events.length >= n, `${this.events.length} of ${n} events came: ${JSON.stringify(this.events)}`);
    return this.events.slice(0, n);
  }

  async all(): Promise<StreamEvent[]> {
    const events = await this.waitFor(this.count);
    await this.finished;
    return events;
  }
}

const collect = (events: AsyncIterable<StreamEvent>, count: number): Promise<StreamEvent[]> => new Reader(events, count).all();

async function create(client: Client, title: string): Promise<string> {
  return (await client.create_tasks({ tasks: [{ title }] })).results[0]?.task_id as string;
}

async function update(client: Client, item: Parameters<Client["sendUpdates"]>[0][number]): Promise<void> {
  const answer = await client.update_tasks({ updates: [item] });
  assert.equal(answer.updated, 1, JSON.stringify(answer));
}

async function claimOne(client: Client): Promise<string> {
  const claimed = await client.claim_task({ lease_seconds: 60 });
  assert.ok(claimed && "lease_id" in claimed);
  return claimed.lease_id;
}

const taskOf = (e: StreamEvent): string => e.data.data.task_id;
const summary = (events: StreamEvent[]): [number, string, string][] => events.map((e) => [e.id, e.type, taskOf(e)]);
const kinds = (events: StreamEvent[]): [string, string][] => events.map((e) => [e.type, taskOf(e)]);

async function waitsHeld(): Promise<number> {
  const line = (await admin().metrics()).split("\n").find((l) => l.startsWith("taskq_task_waits "));
  assert.ok(line, "no taskq_task_waits in /metrics");
  return Number(line.split(" ")[1]);
}

// ------------------------------------------------------------------ waiting

test("a wait is released by a completion from another call", async () => {
  const org = await newOrg();
  const task = await create(org.client, "to wait for");
  const leaseId = await claimOne(org.client);
  const before = await waitsHeld();
  const started = Date.now();
  let answered = false;
  const waiting = new Client({ baseUrl: serverUrl(), apiKey: org.key }).wait([task], { waitSeconds: 30 }).finally(() => {
    answered = true;
  });
  await waitUntil("the server holds the wait", async () => (await waitsHeld()) > before);
  assert.equal(answered, false, "the wait answered before the task was finished");
  await update(org.client, { task_id: task, lease_id: leaseId, status: "completed", note: "done" });
  const answer = await waiting;
  assert.equal(answer.done, true);
  assert.deepEqual(answer.tasks.map((t) => [t.task_id, t.status]), [[task, "completed"]]);
  assert.ok(Date.now() - started < 25_000);
});

test("waits answer with what they found, and a loop of them gives up at its timeout", async () => {
  const org = await newOrg();
  const done = await create(org.client, "done");
  const pending = await create(org.client, "pending");
  await update(org.client, { task_id: done, status: "canceled", note: "not needed", assignee: "owner" });
  const unknown = "00000000-0000-4000-8000-000000000001";
  const anyone = await org.client.wait([done, pending, unknown], { until: "any", waitSeconds: 5 });
  assert.equal(anyone.done, true);
  assert.deepEqual(anyone.not_found, [unknown]);
  assert.deepEqual(anyone.tasks.map((t) => t.status), ["canceled", "pending"]);
  let started = Date.now();
  const everyone = await org.client.wait([done, pending], { waitSeconds: 1 });
  assert.equal(everyone.done, false);
  assert.ok(Date.now() - started >= 900);
  started = Date.now();
  const gaveUp = await org.client.waitUntilDone([pending], { timeoutMs: 1500 });
  const took = Date.now() - started;
  assert.equal(gaveUp.done, false);
  assert.ok(took >= 1500 && took < 6000, `${took} ms`);
  // Nothing to wait for: it answers at once instead of looping.
  const nothing = await org.client.waitUntilDone([unknown], { until: "any" });
  assert.deepEqual([nothing.done, nothing.not_found], [false, [unknown]]);
});

// --------------------------------------------------------------- the stream

test("events come in order, replayed then live, and filters keep what they name", async () => {
  const org = await newOrg();
  const a = await create(org.client, "a");
  const reader = new Reader(org.client.events({ since: 0 }), 4);
  const [first] = await reader.waitFor(1);
  assert.deepEqual(kinds([first as StreamEvent]), [["task.created", a]]);
  // The stream is open: what follows comes live.
  const leaseId = await claimOne(org.client);
  await update(org.client, { task_id: a, lease_id: leaseId, status: "completed", note: "done" });
  const b = await create(org.client, "b");
  const events = await reader.all();
  assert.deepEqual(kinds(events), [
    ["task.created", a],
    ["task.claimed", a],
    ["task.completed", a],
    ["task.created", b],
  ]);
  const ids = events.map((e) => e.id);
  assert.deepEqual(ids, [...new Set(ids)].sort((x, y) => x - y));
  assert.ok(events.every((e) => e.data.type === e.type));
  const completed = events[2]?.data.data;
  assert.deepEqual([completed?.from_status, completed?.to_status], ["in_progress", "completed"]);
  assert.deepEqual(summary(await collect(org.client.events({ since: 0, types: ["task.completed"] }), 1)), summary(events).slice(2, 3));
  assert.deepEqual(summary(await collect(org.client.events({ since: 0, taskIds: [b] }), 1)), summary(events).slice(3));
  const paused = await create(org.client, "paused");
  await update(org.client, { task_id: paused, status: "paused", note: "later", assignee: "owner" });
  const unnamed = await collect(org.client.events({ since: 0, taskIds: [paused] }), 2);
  assert.deepEqual(unnamed.map((e) => [e.type, e.data.type]), [
    ["task.created", "task.created"],
    ["task.status_changed", "task.status_changed"],
  ]);
});

test("a stream resumes after the last event it handed out", async () => {
  const org = await newOrg();
  const tasks = [await create(org.client, "t0"), await create(org.client, "t1"), await create(org.client, "t2")];
  const leaseId = await claimOne(org.client);
  await update(org.client, { task_id: tasks[0] as string, lease_id: leaseId, status: "completed", note: "done" });
  const every = await collect(org.client.events({ since: 0 }), 5);
  const head = await collect(org.client.events({ since: 0 }), 2);
  assert.deepEqual(summary(head), summary(every.slice(0, 2)));
  const rest = new Reader(org.client.events({ since: head[1]?.id as number }), 4);
  assert.deepEqual(summary(await rest.waitFor(3)), summary(every.slice(2)));
  // Exactly the rest: the next event is a new one.
  const later = await create(org.client, "later");
  assert.deepEqual(kinds((await rest.all()).slice(3)), [["task.created", later]]);
});

for (const clean of [true, false]) {
  test(`the iterator reads on across cut connections (${clean ? "the stream ended" : "the connection broke"})`, async () => {
    const org = await newOrg();
    for (let i = 0; i < 5; i += 1) await create(org.client, `t${i}`);
    const claimed = await org.client.claim_task({ count: 2, lease_seconds: 60 });
    assert.ok(claimed && "tasks" in claimed && claimed.tasks.length === 2);
    const every = await collect(org.client.events({ since: 0 }), 7);
    const proxy = await new StreamCuttingProxy(serverUrl(), 2, clean).start();
    let events: StreamEvent[];
    let later: string;
    try {
      const through = new Client({ baseUrl: proxy.url, apiKey: org.key });
      const reader = new Reader(through.events({ since: 0 }), 8);
      assert.deepEqual(summary(await reader.waitFor(7)), summary(every));
      later = await create(org.client, "later");
      events = await reader.all();
    } finally {
      proxy.close();
    }
    assert.ok(proxy.cuts >= 3, `the proxy cut ${proxy.cuts} connections`);
    assert.deepEqual(summary(events.slice(0, 7)), summary(every));
    assert.deepEqual(kinds(events.slice(7)), [["task.created", later]]);
  });
}

test("a stream refused for good throws, and an abort ends the iteration", async () => {
  const org = await newOrg();
  const invalid = new Client({ baseUrl: serverUrl(), apiKey: "tq_not_a_key" }).events();
  await assert.rejects(invalid.next(), (e: unknown) => e instanceof ApiError && e.status === 401);
  await assert.rejects(
    org.client.events({ types: "task.exploded" }).next(),
    (e: unknown) => e instanceof ApiError && e.status === 400 && /types/.test(e.body.error),
  );
  // Ten streams a key: the eleventh is refused without Retry-After, so not retried.
  await create(org.client, "open");
  const streams = Array.from({ length: 10 }, () => org.client.events({ since: 0 }));
  try {
    for (const stream of streams) assert.equal((await stream.next()).value?.type, "task.created");
    const refused = org.client.events({ since: 0 }).next();
    await assert.rejects(refused, (e: unknown) => e instanceof ApiError && e.status === 429 && e.body["limit_type"] === "streams");
  } finally {
    await Promise.all(streams.map((s) => s.return()));
  }
  // An abort ends the iteration of an open stream, without an error.
  const stop = new AbortController();
  const seen: StreamEvent[] = [];
  for await (const event of org.client.events({ since: 0, signal: stop.signal })) {
    seen.push(event);
    stop.abort();
  }
  assert.deepEqual(kinds(seen).map(([type]) => type), ["task.created"]);
});
