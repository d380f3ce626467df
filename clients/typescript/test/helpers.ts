// What the suite shares: the server under test (TASKQ_URL, with its
// operator token in TASKQ_ADMIN_TOKEN: tests/clients.rs starts one and runs
// `node --test` here), orgs with their limits lifted, and polling.

import { randomUUID } from "node:crypto";
import { Client } from "../src/index.js";

export function serverUrl(): string {
  const url = process.env["TASKQ_URL"];
  if (!url) throw new Error("TASKQ_URL names no server: run this suite through tests/clients.rs");
  return url;
}

export function admin(): Client {
  const adminToken = process.env["TASKQ_ADMIN_TOKEN"];
  if (!adminToken) throw new Error("TASKQ_ADMIN_TOKEN is unset");
  return new Client({ baseUrl: serverUrl(), adminToken });
}

export interface Org {
  orgId: string;
  key: string;
  ownerEmail: string;
  client: Client;
}

export async function newOrg(tier: "dev" | "pro" = "pro"): Promise<Org> {
  const n = randomUUID().slice(0, 10);
  const created = await admin().create_org({ name: `ts-${n}`, owner_email: `owner-${n}@example.com`, tier });
  await admin().patch_org(created.org_id, {
    limits: { writes_per_minute: null, reads_per_minute: null, requests_per_month: null, tasks_per_month: null },
  });
  return {
    orgId: created.org_id,
    key: created.owner.api_key,
    ownerEmail: created.owner.email,
    client: new Client({ baseUrl: serverUrl(), apiKey: created.owner.api_key }),
  };
}

export async function waitUntil<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
