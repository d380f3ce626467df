// Going to the org's owner node: a client follows the owner that an answer
// forwarded through another node names (`X-Taskq-Owner`), and leaves an
// owner it cannot reach for the base URL, which still answers.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "../src/index.js";
import { newOrg, serverUrl } from "./helpers.js";

/** A balancer at `<server>/balancer` in front of the real server, which
 * names `owner` in every answer it passes; it and every other URL asked
 * for are recorded. */
function balancedFetch(owner: string, asked: string[]): { baseUrl: string; fetch: typeof fetch } {
  const baseUrl = `${serverUrl()}/balancer`;
  const through: typeof fetch = async (input, init) => {
    const url = String(input);
    asked.push(url);
    if (!url.startsWith(baseUrl)) return fetch(url, init);
    const answer = await fetch(serverUrl() + url.slice(baseUrl.length), init);
    const headers = new Headers(answer.headers);
    headers.set("x-taskq-owner", owner);
    return new Response(answer.body, { status: answer.status, headers });
  };
  return { baseUrl, fetch: through };
}

test("the client sends its org's calls to the owner an answer names", async () => {
  const org = await newOrg();
  const asked: string[] = [];
  const client = new Client({ ...balancedFetch(serverUrl(), asked), apiKey: org.key });
  await client.list_tasks({ limit: 1 });
  const created = await client.create_tasks({ tasks: [{ title: "sent to the owner" }] });
  const taskId = created.results[0]?.task_id as string;
  const got = await client.get_tasks({ task_ids: [taskId] });
  assert.equal(got.tasks[0]?.title, "sent to the owner");
  assert.equal(asked.filter((u) => u.includes("/balancer/")).length, 1, `asked: ${asked.join(", ")}`);
  assert.equal(asked.length, 3);
});

test("an owner out of reach is left for the base URL", async () => {
  const org = await newOrg();
  const asked: string[] = [];
  // Nothing listens on port 1.
  const client = new Client({ ...balancedFetch("http://127.0.0.1:1", asked), apiKey: org.key });
  for (let i = 0; i < 3; i++) {
    const listed = await client.list_tasks({ limit: 1 });
    assert.ok(Array.isArray(listed.tasks));
  }
  assert.equal(asked.filter((u) => u.startsWith("http://127.0.0.1:1/")).length, 1, `asked: ${asked.join(", ")}`);
  assert.equal(asked.filter((u) => u.includes("/balancer/")).length, 3);
});

test("a call broken at the owner is sent again through the base URL", async () => {
  // As the node in front would have answered 503 had it forwarded the call
  // to an owner that died: an update, not repeatable, is not left in doubt.
  const org = await newOrg();
  const taskId = (await org.client.create_tasks({ tasks: [{ title: "t" }] })).results[0]?.task_id as string;
  const asked: string[] = [];
  const balanced = balancedFetch("http://127.0.0.1:1", asked);
  const broken: typeof fetch = async (input, init) => {
    if (String(input).startsWith("http://127.0.0.1:1/")) {
      asked.push(String(input));
      throw new TypeError("fetch failed", { cause: new Error("other side closed") });
    }
    return balanced.fetch(input, init);
  };
  const client = new Client({ baseUrl: balanced.baseUrl, fetch: broken, apiKey: org.key });
  await client.list_tasks({ limit: 1 });
  await client.update_tasks({ updates: [{ task_id: taskId, priority: 3 }] });
  assert.equal(asked.filter((u) => u.startsWith("http://127.0.0.1:1/")).length, 1);
  assert.equal((await org.client.get_tasks({ task_ids: [taskId] })).tasks[0]?.priority, 3);
});
