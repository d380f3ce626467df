// Every operation of the generated client, called against the real server,
// with its answer checked; the last assertion proves none was left out.

import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import { test } from "node:test";
import { ApiError, Client, OPERATIONS, type CallOptions } from "../src/index.js";
import type { OperationSpec } from "../src/transport.js";
import { serverUrl } from "./helpers.js";

const called = new Set<string>();

class Recording extends Client {
  protected override invoke(
    operation: OperationSpec,
    path: readonly string[],
    query: Record<string, unknown> | undefined,
    body: unknown,
    options: CallOptions | undefined,
    retryInDoubt?: boolean,
  ): Promise<unknown> {
    called.add(operation.id);
    return super.invoke(operation, path, query, body, options, retryInDoubt);
  }
}

async function refused(call: Promise<unknown>): Promise<ApiError> {
  try {
    await call;
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
  assert.fail("the call was not refused");
}

test("every operation round-trips", async () => {
  const url = serverUrl();
  const admin = new Recording({ baseUrl: url, adminToken: process.env["TASKQ_ADMIN_TOKEN"] as string });

  // ---- service and operator
  assert.deepEqual(await admin.health(), { status: "ok" });
  const document = await admin.openapi();
  assert.equal(document["openapi"], "3.1.0");
  assert.match(await admin.metrics(), /taskq_http_requests_total/);
  assert.match((await admin.feedback_org()).org_id, /^[0-9a-f-]{36}$/);
  assert.ok(Array.isArray((await admin.cluster()).nodes));
  assert.ok(Array.isArray((await admin.operator_stats()).orgs));

  const n = randomUUID().slice(0, 8);
  const org = await admin.create_org({ name: `tour-${n}`, owner_email: `owner-${n}@example.com`, tier: "pro" });
  assert.equal(org.tier, "pro");
  assert.equal(org.owner.role, "owner");
  assert.equal((await admin.patch_org(org.org_id, { limits: { writes_per_minute: null } })).org_id, org.org_id);
  const shown = await admin.get_org(org.org_id);
  assert.ok(!("deleting" in shown), "an org not deleted shows its record");
  assert.equal(shown.name, `tour-${n}`);
  const owner = new Recording({ baseUrl: url, apiKey: org.owner.api_key });
  const memberEmail = `member-${n}@example.com`;
  const added = await admin.add_member(org.org_id, { email: memberEmail, role: "user" });
  assert.equal(added.role, "user");
  const reset = await admin.reset_key(org.org_id, memberEmail, { key_name: "reset" });
  assert.equal(reset.key_name, "reset");
  assert.equal((await new Recording({ baseUrl: url, apiKey: reset.api_key }).get_me()).email, memberEmail);
  const notBlocked = await refused(admin.unblock_member({ email: memberEmail }));
  assert.equal(notBlocked.status, 404);
  assert.match(notBlocked.body.error, /not blocked/);

  // ---- tasks
  const created = await owner.create_tasks({
    tasks: [{ title: "write", ref: "w", priority: 1 }, { title: "review", blocked_by: ["ref:w"] }],
  });
  assert.equal(created.created, 2);
  assert.deepEqual(created.results.map((r) => r.status), ["pending", "blocked"]);
  const [first, second] = created.results.map((r) => r.task_id) as [string, string];
  assert.deepEqual((await owner.list_tasks({ status: "blocked", limit: 10 })).tasks.map((t) => t.task_id), [second]);
  const claimed = await owner.claim_task({ lease_seconds: 30 });
  assert.ok(claimed && "task_id" in claimed);
  assert.equal(claimed.task_id, first);
  const updated = await owner.update_tasks({
    updates: [{ task_id: first, lease_id: claimed.lease_id, status: "completed", note: "done", output: { n: 1 } }],
  });
  assert.equal(updated.updated, 1);
  const got = await owner.get_tasks({ task_ids: [first] });
  assert.deepEqual(got.tasks[0]?.output, { n: 1 });
  assert.deepEqual(got.tasks[0]?.history?.map((e) => e.to_status), ["pending", "in_progress", "completed"]);
  const unknown = randomUUID();
  const waited = await owner.wait_for_tasks({ task_ids: [first, second, unknown], until: "any", wait_seconds: 0 });
  assert.equal(waited.done, true);
  assert.deepEqual(waited.not_found, [unknown]);
  assert.deepEqual(waited.tasks.map((t) => [t.task_id, t.status]), [[first, "completed"], [second, "pending"]]);
  assert.equal((await owner.wait_for_tasks({ task_ids: [second], wait_seconds: 0 })).done, false);
  assert.deepEqual(await owner.search_tasks({ query: "write" }), { available: false, reason: "not_configured" });
  const plan = await owner.plan_tasks({ goal: "ship it" });
  assert.ok("available" in plan && plan.available === false);

  // ---- reports, quota, feedback
  const computed = await admin.recompute_reports(org.org_id, { reports: ["insights", "standup"] });
  assert.ok(computed.computed.includes("insights"));
  const insights = await owner.get_insights();
  assert.ok("throughput" in insights);
  const runbooks = await owner.list_runbooks();
  assert.ok("runbooks" in runbooks || "available" in runbooks);
  const standup = await owner.get_standup({ scope: "org", cadence: "daily" });
  assert.ok("headline" in standup || "available" in standup);
  const quota = await owner.get_quota();
  assert.equal(quota.tier, "pro");
  assert.ok(quota.used >= 2);
  assert.match((await owner.send_feedback({ message: "the client works", type: "general" })).task_id, /^[0-9a-f-]{36}$/);

  // ---- tags, members, teams
  assert.equal((await owner.create_tags({ tags: [{ name: "ui" }, { name: "db", default: true }] })).created, 2);
  assert.deepEqual((await owner.list_tags()).map((t) => t.name).sort(), ["db", "ui"]);
  assert.equal((await owner.update_tags({ tags: [{ name: "ui", description: "the front end" }] })).tags[0]?.description, "the front end");
  assert.deepEqual((await owner.update_member(memberEmail, { profile_tags: ["ui"] })).profile_tags, ["ui"]);
  assert.ok((await owner.list_members()).some((m) => m.email === memberEmail));
  assert.deepEqual((await owner.update_me({ profile_tags: ["db"] })).profile_tags, ["db"]);
  assert.deepEqual((await owner.create_team({ name: "web", tags: ["ui"] })).tags, ["ui"]);
  assert.deepEqual((await owner.add_team_member("web", { email: memberEmail })).sources, ["manual"]);
  assert.deepEqual((await owner.get_team("web")).members.map((m) => m.email), [memberEmail]);
  assert.equal((await owner.update_team("web", { description: "web people" })).description, "web people");
  assert.deepEqual((await owner.list_teams()).map((t) => t.name), ["web"]);
  await owner.remove_team_member("web", memberEmail);
  assert.deepEqual((await owner.get_team("web")).members, []);
  assert.deepEqual(await admin.set_idp(org.org_id, { enrolled: true }), { enrolled: true });
  assert.deepEqual(await admin.idp_sync(org.org_id, { teams: { web: [memberEmail] } }), { added: 1, removed: 0 });
  await owner.delete_team("web");
  assert.deepEqual(await owner.list_teams(), []);
  assert.deepEqual(await owner.delete_tags({ names: ["ui"] }), { deleted: ["ui"], count: 1 });

  // ---- webhooks
  const hook = await owner.create_webhook({ url: "http://127.0.0.1:9/hook", events: ["task.completed"] });
  assert.match(hook.secret, /^whsec_/);
  assert.deepEqual((await owner.list_webhooks()).webhooks.map((w) => w.webhook_id), [hook.webhook_id]);
  assert.notEqual((await owner.rotate_webhook_secret(hook.webhook_id)).secret, hook.secret);
  assert.ok((await owner.test_webhook(hook.webhook_id)).event_id);
  assert.ok(Array.isArray((await owner.list_webhook_deliveries(hook.webhook_id)).deliveries));
  await owner.delete_webhook(hook.webhook_id);
  assert.deepEqual((await owner.list_webhooks()).webhooks, []);

  // ---- schedules
  const schedule = await owner.create_schedule({ name: "nightly", cron: "0 2 * * *", timezone: "Europe/Berlin", task: { title: "Audit" } });
  assert.equal(schedule.active, true);
  assert.ok(schedule.next_run_at);
  assert.deepEqual((await owner.list_schedules()).schedules.map((s) => s.schedule_id), [schedule.schedule_id]);
  assert.equal((await owner.get_schedule(schedule.schedule_id)).cron, "0 2 * * *");
  const paused = await owner.update_schedule(schedule.schedule_id, { active: false });
  assert.equal(paused.active, false);
  assert.equal(paused.next_run_at, null);
  await owner.delete_schedule(schedule.schedule_id);
  const gone = await refused(owner.get_schedule(schedule.schedule_id));
  assert.equal(gone.status, 404);
  assert.equal(gone.body.error, "schedule not found");

  // ---- keys
  const spare = await owner.create_key({ name: "spare" });
  assert.ok((await owner.list_keys()).keys.some((k) => k.key_id === spare.key_id && k.active));
  await owner.revoke_key(spare.key_id);
  const revoked = await refused(new Client({ baseUrl: url, apiKey: spare.api_key }).get_me());
  assert.equal(revoked.status, 401);
  assert.equal(revoked.body.error, "invalid api key");

  // ---- the org's data key
  const managed = await refused(owner.get_org_dek());
  assert.equal(managed.status, 409);
  assert.equal(managed.body["key_provider"], "managed");
  const byok = await admin.create_org({ name: `byok-${n}`, owner_email: `o-${n}@example.com`, encryption: "byok" });
  const byokOwner = new Recording({ baseUrl: url, apiKey: byok.owner.api_key });
  const wrapped = randomBytes(48).toString("base64");
  assert.deepEqual(await byokOwner.put_org_dek({ wrapped_dek: wrapped, kms_key_id: "kms://key/1" }), {
    status: "created",
    org_id: byok.org_id,
  });
  assert.equal((await byokOwner.get_org_dek()).wrapped_dek, wrapped);

  const rotated = await admin.rotate_master_key({ new_key: randomBytes(32).toString("base64") });
  assert.ok(rotated.rewrapped >= 1);
  assert.equal((await owner.get_quota()).tier, "pro");

  const exported = (await admin.export_org(org.org_id)).trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(exported[0].kind, "org");
  assert.equal(exported[0].org_id, org.org_id);
  const doomed = await admin.create_org({ name: `doomed-${n}`, owner_email: `doomed-${n}@example.com` });
  assert.deepEqual(await admin.delete_org(doomed.org_id), { org_id: doomed.org_id, deleting: true });

  const missing = Object.keys(OPERATIONS).filter((id) => !called.has(id));
  assert.deepEqual(missing, [], `operations never called: ${missing.join(", ")}`);
});

test("creates carry client-minted ids", async () => {
  const url = serverUrl();
  const admin = new Client({ baseUrl: url, adminToken: process.env["TASKQ_ADMIN_TOKEN"] as string });
  const n = randomUUID().slice(0, 8);
  const org = await admin.create_org({ name: `ids-${n}`, owner_email: `owner-${n}@example.com` });
  const client = new Client({ baseUrl: url, apiKey: org.owner.api_key });
  const created = await client.create_tasks({ tasks: [{ title: "a" }] });
  const id = created.results[0]?.task_id as string;
  // A v4 id is the client's (the server assigns v7 ones).
  assert.equal(id[14], "4");
  const again = await refused(client.create_tasks({ tasks: [{ title: "a", task_id: id }] }));
  assert.equal(again.status, 409);
  assert.equal(again.body["task_id"], id);
});
