// `Worker`: claims tasks and runs a handler on each, keeping their leases,
// until it is told to stop.
//
// The rules (CONTRACT §12):
// - Claims are long polls (`wait_seconds`) for as many tasks as there are
//   free slots (`count`, at most 25), with the worker's `tags` filter and
//   `leaseSeconds`.
// - While a handler runs, its lease is renewed every third of
//   `leaseSeconds` by an update carrying only the `lease_id`. When a
//   renewal answers `lease lost` (the lease ran out and someone else holds
//   the task), the handler's `signal` aborts and its result is dropped: a
//   task whose lease was lost is never completed by this worker.
// - A handler's result completes or fails its task (see outcome.ts).
// - On SIGTERM, SIGINT (Node) or `stop()` the worker stops claiming, gives
//   running handlers `graceSeconds` to finish, then aborts the rest and
//   gives their tasks back to `pending` with the note `released by worker`.
// - Under the org's per-minute limits (429 with `Retry-After`) the worker
//   slows down and says so: it stops claiming until the limit lets calls
//   through again, sends what finishes its tasks before renewals
//   (updates.ts), renews all its leases in one call rather than one call
//   each, and logs one line an episode (`rate limited: write, 30/min on the
//   dev tier; claims paused for 12 s; 4 tasks held`) with an `error` event
//   for `onEvent`. A lease that runs out meanwhile uses no attempt on the
//   server.

import type { Client } from "./client.js";
import { completion, failure, release, renewal, withoutOutput, type UpdateItem } from "./outcome.js";
import type { components } from "./schema.js";
import { ApiError, sleep, UsageError } from "./transport.js";
import { BATCH, Updates } from "./updates.js";

export type ClaimedTask = components["schemas"]["ClaimedTask"];

/** What a handler gets besides its task. */
export interface JobContext {
  readonly taskId: string;
  readonly leaseId: string;
  /** Aborts when the lease is lost or the worker stops before the handler. */
  readonly signal: AbortSignal;
}

export type Handler = (task: ClaimedTask, job: JobContext) => unknown;

/** What the worker tells its `onEvent` hook (for metrics). */
export interface WorkerEvent {
  kind: "claimed" | "completed" | "failed" | "lease_lost" | "released" | "renewed" | "error";
  taskId?: string;
  /** The handler's time, for the finishing kinds. */
  seconds?: number;
  error?: string;
}

export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface WorkerOptions {
  client: Client;
  handler: Handler;
  tags?: string[];
  concurrency?: number;
  leaseSeconds?: number;
  /** How long one claim waits for a task (0 to 30, default 20). */
  waitSeconds?: number;
  /** How long running handlers get to finish once the worker stops (default 30). */
  graceSeconds?: number;
  includeContext?: boolean;
  onEvent?: (event: WorkerEvent) => void;
  /** Structured logs; the default writes JSON lines to stderr (console.error). */
  logger?: Logger;
  /** Stop on SIGTERM and SIGINT when running in Node (default true). */
  handleSignals?: boolean;
}

/** JSON lines on stderr, one object a line. */
export const jsonLogger: Logger = {
  info: (message, fields) => console.error(JSON.stringify({ level: "info", message, ...fields })),
  warn: (message, fields) => console.error(JSON.stringify({ level: "warn", message, ...fields })),
  error: (message, fields) => console.error(JSON.stringify({ level: "error", message, ...fields })),
};

const LOST = new Set(["lease lost", "task not found"]);
/** Refusals this far apart are one episode, logged once. */
const EPISODE_GAP_MS = 30_000;
/** After a limit's pause, how much longer claims wait than the worker's
 * other calls, so that what it holds goes first. */
const THROTTLE_MARGIN_MS = 1_000;

/** What the org's per-minute limits have said: until when claims wait,
 * and whether a refusal opens a new episode. */
export class Throttle {
  until = 0;
  last = Number.NEGATIVE_INFINITY;

  /** Notes a refusal heard at `now` whose call goes again after `waitMs`;
   * answers whether it opens an episode. */
  refused(waitMs: number, now: number): boolean {
    const fresh = now - this.last > EPISODE_GAP_MS;
    this.last = now;
    this.until = Math.max(this.until, now + waitMs);
    return fresh;
  }

  /** How long claims wait from `now`, in milliseconds. */
  pause(now: number): number {
    return Math.max(0, this.until - now);
  }

  recent(now: number, withinMs: number): boolean {
    return now - this.last <= withinMs;
  }
}

/** A signal that aborts with the first of two (`AbortSignal.any` is not in Node 18). */
function either(a: AbortSignal, b: AbortSignal): AbortSignal {
  if (a.aborted) return a;
  if (b.aborted) return b;
  const both = new AbortController();
  const abort = (event: Event): void => both.abort((event.target as AbortSignal).reason);
  a.addEventListener("abort", abort, { once: true });
  b.addEventListener("abort", abort, { once: true });
  return both.signal;
}

/** The episode's line: which limit, its number and tier, the pause. */
export function describeLimit(body: Record<string, unknown>, pausedMs: number, held: number): string {
  const kind = typeof body["limit_type"] === "string" ? body["limit_type"] : "request";
  const window = typeof body["window_seconds"] === "number" ? body["window_seconds"] : 60;
  const per = window === 60 ? "min" : `${window}s`;
  const number = typeof body["limit"] === "number" ? `, ${body["limit"]}/${per}` : "";
  const tier = typeof body["tier"] === "string" ? ` on the ${body["tier"]} tier` : "";
  const heldText = `${held} task${held === 1 ? "" : "s"} held`;
  return `rate limited: ${kind}${number}${tier}; claims paused for ${Math.round(pausedMs / 1000)} s; ${heldText}`;
}

interface Job {
  task: ClaimedTask;
  started: number;
  renewed: number;
  controller: AbortController;
  state: "running" | "finishing" | "lost" | "released";
  /** A renewal of this job's lease is under way. */
  renewing: boolean;
  settled: Promise<void>;
  /** Resolves when the job's handler is given up on (lost or released). */
  abandon: () => void;
}

interface NodeProcess {
  once(signal: string, listener: () => void): unknown;
  removeListener(signal: string, listener: () => void): unknown;
}

function nodeProcess(): NodeProcess | undefined {
  const candidate = (globalThis as { process?: Partial<NodeProcess> }).process;
  return typeof candidate?.once === "function" && typeof candidate.removeListener === "function"
    ? (candidate as NodeProcess)
    : undefined;
}

export class Worker {
  readonly concurrency: number;
  readonly leaseSeconds: number;
  private readonly options: WorkerOptions;
  private readonly log: Logger;
  private readonly jobs = new Map<string, Job>();
  private readonly stopController = new AbortController();
  private slotFreed: (() => void) | undefined;
  private readonly updates: Updates;
  private readonly throttle = new Throttle();
  /** Aborts the claim under way when the limit refused it. */
  private claimRefused: AbortController | undefined;

  constructor(options: WorkerOptions) {
    this.options = options;
    this.concurrency = options.concurrency ?? 1;
    this.leaseSeconds = options.leaseSeconds ?? 60;
    if (this.concurrency < 1) throw new RangeError("concurrency must be at least 1");
    if (this.leaseSeconds < 1 || this.leaseSeconds > 259200) throw new RangeError("leaseSeconds must be within 1..=259200");
    this.log = options.logger ?? jsonLogger;
    this.updates = new Updates((items) => options.client.sendUpdates(items));
  }

  /** Asks the worker to stop; `run()` settles once it has. */
  stop(): void {
    this.stopController.abort(new Error("the worker stops"));
  }

  get stopping(): boolean {
    return this.stopController.signal.aborted;
  }

  /** Works tasks until `stop()` (or SIGTERM/SIGINT); then releases what is left. */
  async run(): Promise<void> {
    const proc = this.options.handleSignals === false ? undefined : nodeProcess();
    const onSignal = (): void => this.stop();
    proc?.once("SIGTERM", onSignal);
    proc?.once("SIGINT", onSignal);
    const stopListening = this.options.client.onRateLimited((operationId, body, waitMs) =>
      this.rateLimited(operationId, body, waitMs),
    );
    const renewals = this.renewLoop();
    this.log.info("worker started", { concurrency: this.concurrency, lease_seconds: this.leaseSeconds, tags: this.options.tags });
    try {
      await this.claimLoop();
    } finally {
      await this.drain();
      await renewals;
      stopListening();
      proc?.removeListener("SIGTERM", onSignal);
      proc?.removeListener("SIGINT", onSignal);
      this.log.info("worker stopped");
    }
  }

  private emit(kind: WorkerEvent["kind"], job?: Job, seconds?: number, error?: string): void {
    if (!this.options.onEvent) return;
    const event: WorkerEvent = { kind };
    if (job) event.taskId = job.task.task_id;
    if (seconds !== undefined) event.seconds = seconds;
    if (error !== undefined) event.error = error;
    try {
      this.options.onEvent(event);
    } catch (hookError) {
      this.log.error("the onEvent hook threw", { error: String(hookError) });
    }
  }

  private rateLimited(operationId: string, body: Record<string, unknown>, waitMs: number): void {
    const now = Date.now();
    if (this.throttle.refused(waitMs, now)) {
      const line = describeLimit(body, this.throttle.pause(now), this.jobs.size);
      this.log.warn(line, { limit_type: body["limit_type"], limit: body["limit"], tier: body["tier"] });
      this.emit("error", undefined, undefined, line);
    }
    // The claim under way was refused, so nothing of it was written: it is
    // given up rather than sent again when the limit allows.
    if (operationId === "claim_task") this.claimRefused?.abort(new Error("rate limited"));
  }

  // ---------------------------------------------------------------- claims

  private async claimLoop(): Promise<void> {
    const stop = this.stopController.signal;
    let failures = 0;
    while (!stop.aborted) {
      const free = this.concurrency - this.jobs.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => {
          this.slotFreed = resolve;
          stop.addEventListener("abort", () => resolve(), { once: true });
        });
        continue;
      }
      const body: components["schemas"]["ClaimRequest"] = {
        lease_seconds: this.leaseSeconds,
        wait_seconds: Math.max(0, Math.min(this.options.waitSeconds ?? 20, 30)),
        count: Math.min(free, BATCH),
        include_context: this.options.includeContext ?? true,
      };
      if (this.options.tags?.length) body.tags = this.options.tags;
      const pause = this.throttle.pause(Date.now());
      if (pause > 0) {
        // Claims wait for the limit; what the worker holds goes first.
        await sleep(pause + THROTTLE_MARGIN_MS, stop).catch(() => undefined);
        continue;
      }
      const refused = new AbortController();
      this.claimRefused = refused;
      let answer: components["schemas"]["ClaimAnswer"];
      try {
        answer = await this.options.client.claim_task(body, { signal: either(stop, refused.signal) });
      } catch (error) {
        if (stop.aborted) break;
        if (refused.signal.aborted) continue;
        if (error instanceof UsageError) throw error;
        failures += 1;
        const pause = Math.min(30_000, 500 * 2 ** Math.min(failures, 6));
        this.log.warn("claim failed; trying again", { error: String(error), pause_ms: pause });
        this.emit("error", undefined, undefined, String(error));
        await sleep(pause, stop).catch(() => undefined);
        continue;
      }
      failures = 0;
      const tasks = answer && "tasks" in answer ? answer.tasks : [];
      for (const task of tasks) this.start(task);
    }
  }

  // ------------------------------------------------------------------ jobs

  private start(task: ClaimedTask): void {
    let abandon = (): void => undefined;
    const abandoned = new Promise<void>((resolve) => {
      abandon = resolve;
    });
    const now = Date.now();
    const job: Job = {
      task,
      started: now,
      renewed: now,
      controller: new AbortController(),
      state: "running",
      renewing: false,
      settled: Promise.resolve(),
      abandon,
    };
    this.jobs.set(task.task_id, job);
    this.log.info(`task ${task.task_id} claimed`, { task_id: task.task_id, lease_id: task.lease_id });
    this.emit("claimed", job);
    job.settled = this.work(job, abandoned).finally(() => {
      this.jobs.delete(task.task_id);
      this.slotFreed?.();
    });
  }

  private async work(job: Job, abandoned: Promise<void>): Promise<void> {
    const { task_id: taskId, lease_id: leaseId } = job.task;
    const context: JobContext = { taskId, leaseId, signal: job.controller.signal };
    const handled = (async () => this.options.handler(job.task, context))().then(
      (result) => completion(taskId, leaseId, result),
      (error: unknown) => failure(taskId, leaseId, error),
    );
    const item = await Promise.race([handled, abandoned.then(() => undefined)]);
    if (item === undefined || job.state !== "running") return;
    job.state = "finishing";
    await this.finish(job, item);
  }

  private async finish(job: Job, item: UpdateItem): Promise<void> {
    const seconds = (Date.now() - job.started) / 1000;
    const taskId = job.task.task_id;
    let result;
    try {
      try {
        result = await this.updates.send(item);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 400)) throw error;
        // The server refused the item itself (an output too large): fail
        // the task with why, so it does not wait for its lease.
        item = withoutOutput(item, error.body.error);
        result = await this.updates.send(item);
      }
    } catch (error) {
      this.log.error(`task ${taskId}: could not finish it: ${String(error)}`, { task_id: taskId, error: String(error) });
      this.emit("error", job, undefined, String(error));
      return;
    }
    if (!("error" in result)) {
      this.log.info(`task ${taskId} ${item.status}`, { task_id: taskId, seconds });
      this.emit(item.status === "completed" ? "completed" : "failed", job, seconds);
    } else if (LOST.has(result.error) && (await this.landed(item))) {
      // A repeat of an update whose first attempt landed (its answer was
      // lost, or a node died after its commit) hears `lease lost`.
      this.log.info(`task ${taskId} ${item.status}`, { task_id: taskId, seconds });
      this.emit(item.status === "completed" ? "completed" : "failed", job, seconds);
    } else if (LOST.has(result.error)) {
      this.log.warn(`task ${taskId}: lease lost before it was finished`, { task_id: taskId });
      this.emit("lease_lost", job, seconds);
    } else {
      this.log.error(`task ${taskId}: the server refused to finish it: ${result.error}`, { task_id: taskId, error: result.error });
      this.emit("error", job, undefined, result.error);
    }
  }

  /** Whether the task already has the status `item` gives it. */
  private async landed(item: UpdateItem): Promise<boolean> {
    try {
      const found = await this.options.client.get_tasks({ task_ids: [item.task_id] });
      return found.tasks.some((task) => task.status === item.status);
    } catch {
      return false;
    }
  }

  private lose(job: Job): void {
    if (job.state !== "running") return;
    job.state = "lost";
    job.controller.abort(new Error("lease lost"));
    job.abandon();
    this.log.warn(`task ${job.task.task_id}: lease lost; handler aborted`, { task_id: job.task.task_id });
    this.emit("lease_lost", job);
  }

  // -------------------------------------------------------------- renewals

  /** Renews each lease every third of `leaseSeconds` (every half while
   * the org's limits have refused calls within a lease), and when one is
   * due renews with it every lease past half its interval: one call renews
   * them all, not one call each. */
  private async renewLoop(): Promise<void> {
    const leaseMs = this.leaseSeconds * 1000;
    const stop = this.stopController.signal;
    while (!stop.aborted) {
      await sleep(Math.min(leaseMs / 3, 1000), stop).catch(() => undefined);
      const now = Date.now();
      const interval = leaseMs / (this.throttle.recent(now, leaseMs) ? 2 : 3);
      const running = [...this.jobs.values()].filter((j) => j.state === "running" && !j.renewing);
      if (!running.some((j) => now - j.renewed >= interval)) continue;
      for (const job of running) {
        if (now - job.renewed >= interval / 2) {
          job.renewed = now;
          job.renewing = true;
          void this.renew(job);
        }
      }
    }
  }

  private async renew(job: Job): Promise<void> {
    const taskId = job.task.task_id;
    try {
      const result = await this.updates.send(renewal(taskId, job.task.lease_id));
      if ("error" in result && LOST.has(result.error)) this.lose(job);
      else if (!("error" in result)) this.emit("renewed", job);
    } catch (error) {
      this.log.warn(`task ${taskId}: lease renewal failed: ${String(error)}`, { task_id: taskId, error: String(error) });
    } finally {
      job.renewing = false;
    }
  }

  // ------------------------------------------------------------------ stop

  private async drain(): Promise<void> {
    const grace = (this.options.graceSeconds ?? 30) * 1000;
    if (this.jobs.size > 0) {
      this.log.info("stopping: waiting for running handlers", { running: this.jobs.size, grace_seconds: grace / 1000 });
      const all = Promise.all([...this.jobs.values()].map((j) => j.settled));
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, grace)))]);
      clearTimeout(timer);
    }
    const left = [...this.jobs.values()].filter((j) => j.state === "running");
    for (const job of left) {
      job.state = "released";
      job.controller.abort(new Error("the worker stops"));
      job.abandon();
    }
    const results = await Promise.allSettled(left.map((j) => this.updates.send(release(j.task.task_id, j.task.lease_id))));
    results.forEach((result, i) => {
      const job = left[i] as Job;
      if (result.status === "rejected") {
        this.log.error(`task ${job.task.task_id}: could not release it: ${String(result.reason)}`, {
          task_id: job.task.task_id,
          error: String(result.reason),
        });
        this.emit("error", job, undefined, String(result.reason));
      } else {
        this.log.info(`task ${job.task.task_id} released`, { task_id: job.task.task_id });
        this.emit("released", job);
      }
    });
    // Updates under way finish before the worker returns.
    await Promise.all([...this.jobs.values()].map((j) => j.settled));
  }
}
