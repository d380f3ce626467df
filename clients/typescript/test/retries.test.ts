// Calls sent again: a create whose answer was lost leaves one task, and an
// update whose answer was lost is reported in doubt instead of being sent
// twice.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, InDoubt } from "../src/index.js";
import { newOrg, serverUrl } from "./helpers.js";
import { DroppingProxy } from "./proxy.js";

test("a create sent again after a dropped connection leaves one task", async () => {
  const org = await newOrg();
  const proxy = await new DroppingProxy(serverUrl(), "POST /tasks ").start();
  let created;
  try {
    const through = new Client({ baseUrl: proxy.url, apiKey: org.key });
    created = await through.create_tasks({ tasks: [{ title: "exactly one", ref: "one" }, { title: "and two" }] });
  } finally {
    proxy.close();
  }
  assert.equal(proxy.dropped, 1, "the proxy dropped no answer");
  assert.equal(created.created, 2);
  assert.deepEqual(created.results.map((r) => r.ref), ["one", null]);
  const listed = (await org.client.list_tasks({ limit: 50 })).tasks;
  assert.deepEqual(listed.map((t) => t.title).sort(), ["and two", "exactly one"]);
  assert.deepEqual(listed.map((t) => t.task_id).sort(), created.results.map((r) => r.task_id).sort());
});

test("an update whose answer was lost is in doubt", async () => {
  const org = await newOrg();
  const taskId = (await org.client.create_tasks({ tasks: [{ title: "t" }] })).results[0]?.task_id as string;
  const proxy = await new DroppingProxy(serverUrl(), "POST /tasks/update ").start();
  try {
    const through = new Client({ baseUrl: proxy.url, apiKey: org.key });
    await assert.rejects(through.update_tasks({ updates: [{ task_id: taskId, priority: 1 }] }), InDoubt);
  } finally {
    proxy.close();
  }
  assert.equal((await org.client.get_tasks({ task_ids: [taskId] })).tasks[0]?.priority, 1);
});
