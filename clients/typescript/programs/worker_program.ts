// A worker process for the black-box tests (tests/clients.rs) and the
// measurement script: it works the org of TASKQ_API_KEY at TASKQ_URL and
// prints one JSON line per worker event on stdout, `{"kind": "ready"}`
// first.
//
// Each task's handler sleeps `sleep_ms` from the task's metadata (default
// WORKER_SLEEP_MS, 0) and completes it with `{by: WORKER_NAME}`; a task
// whose metadata has `fail: true` throws, and `fail_once: true` throws on
// its first try (before a retry). Stops on SIGTERM or SIGINT and
// exits 0.

import { Client, Worker, type WorkerEvent } from "../src/index.js";

const env = process.env;
const name = env["WORKER_NAME"] ?? `typescript-${process.pid}`;
const defaultSleep = Number(env["WORKER_SLEEP_MS"] ?? "0");

function emit(event: WorkerEvent): void {
  process.stdout.write(`${JSON.stringify({ kind: event.kind, task_id: event.taskId ?? null, at: Date.now() / 1000, error: event.error })}\n`);
}

const quiet = { info: () => undefined };
const client = new Client({ baseUrl: env["TASKQ_URL"] as string, apiKey: env["TASKQ_API_KEY"] as string });
const tags = (env["WORKER_TAGS"] ?? "").split(",").filter((t) => t);
const worker = new Worker({
  client,
  concurrency: Number(env["WORKER_CONCURRENCY"] ?? "8"),
  leaseSeconds: Number(env["WORKER_LEASE_SECONDS"] ?? "60"),
  waitSeconds: Number(env["WORKER_WAIT_SECONDS"] ?? "5"),
  graceSeconds: Number(env["WORKER_GRACE_SECONDS"] ?? "5"),
  includeContext: false,
  ...(tags.length ? { tags } : {}),
  onEvent: emit,
  logger: {
    ...quiet,
    warn: (message, fields) => console.error(JSON.stringify({ level: "warn", message, ...fields })),
    error: (message, fields) => console.error(JSON.stringify({ level: "error", message, ...fields })),
  },
  handler: async (task, job) => {
    const metadata = (task.metadata ?? {}) as { sleep_ms?: number; fail?: boolean; fail_once?: boolean };
    if (metadata.fail) throw new Error("asked to fail");
    if (metadata.fail_once && task.retries === 0) throw new Error("asked to fail once");
    const ms = metadata.sleep_ms ?? defaultSleep;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(resolve, ms);
      job.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(job.signal.reason);
      });
    });
    return { by: name };
  },
});
process.stdout.write(`${JSON.stringify({ kind: "ready", at: Date.now() / 1000 })}\n`);
await worker.run();
