// `Client`: the generated operations over `fetch`, plus what the document
// cannot say.
//
// - Creates carry client-minted ids (a v4 UUID for every item without
//   one), so a create sent again after a lost answer cannot make a task
//   twice: the repeat answers 409 `task_id already exists`, and when every
//   id of the call exists with its title the call is answered as the first
//   attempt would have been.
// - `wait(...)` is `POST /tasks/wait` with its arguments spelled out, and
//   `waitUntilDone(...)` a loop of them up to an overall `timeoutMs`.
// - `events(...)` reads `GET /events`, which the document cannot type (a
//   stream of Server-Sent Events), and resumes it with `Last-Event-ID`
//   whenever it ends (watch.ts).

import { Operations, OPERATIONS } from "./operations.js";
import type { components } from "./schema.js";
import {
  ApiError,
  buildUrl,
  decode,
  errorBody,
  InDoubt,
  neverSent,
  PAUSE_MS,
  queryString,
  repeatable,
  retryDelayMs,
  Route,
  sleep,
  UsageError,
  waitSeconds,
  withTimeout,
  type CallOptions,
  type ClientOptions,
  type OperationSpec,
} from "./transport.js";
import { nextWaitSeconds, readEvents, waitingIsOver, type EventsOptions, type StreamEvent } from "./watch.js";

type CreateTasks = components["schemas"]["CreateTasks"];
type CreateAnswer = components["schemas"]["CreateAnswer"];
type GetAnswer = components["schemas"]["GetAnswer"];
type WaitAnswer = components["schemas"]["WaitAnswer"];
type WaitUntil = components["schemas"]["WaitUntil"];

export interface WaitOptions extends CallOptions {
  /** `all` (the default) or `any` of the tasks. */
  until?: WaitUntil;
  /** How long the server holds the call (0 to 30, default 30). */
  waitSeconds?: number;
}

export interface WaitUntilDoneOptions extends CallOptions {
  until?: WaitUntil;
  /** Give up after this long (default: never), answering `done: false`. */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_RETRY_FOR_MS = 300_000;

async function newId(): Promise<string> {
  const webCrypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  // Node 18 has no global crypto; the specifier is a variable so that
  // browser bundles do not try to include the module.
  const specifier = "node:crypto";
  const nodeCrypto = (await import(specifier)) as { randomUUID: () => string };
  return nodeCrypto.randomUUID();
}

/** The create body with a task_id on every item that has none. */
export async function withMintedIds(body: CreateTasks): Promise<CreateTasks> {
  const tasks = await Promise.all(
    body.tasks.map(async (item) => (item.task_id ? { ...item } : { ...item, task_id: await newId() })),
  );
  return { ...body, tasks };
}

/** The create's answer rebuilt from the tasks as stored, when every item of
 * the call is there with its title (else the 409 was not ours). */
export function answerFromExisting(body: CreateTasks, found: GetAnswer): CreateAnswer | undefined {
  const byId = new Map(found.tasks.map((task) => [task.task_id, task]));
  const results: CreateAnswer["results"] = [];
  for (const item of body.tasks) {
    const task = byId.get(item.task_id ?? "");
    if (!task || JSON.stringify(task.title) !== JSON.stringify(item.title)) return undefined;
    results.push({ ref: item.ref ?? null, task_id: task.task_id, status: task.status, created_at: task.created_at });
  }
  return { created: results.length, results };
}

/** Told of each refusal by a per-minute limit: the operation, the body, the wait. */
export type LimitListener = (operationId: string, body: { error: string; [key: string]: unknown }, waitMs: number) => void;

export class Client extends Operations {
  readonly options: Readonly<ClientOptions>;
  private readonly fetcher: typeof fetch;
  private readonly route: Route;
  private readonly limitListeners = new Set<LimitListener>();

  constructor(options: ClientOptions) {
    super();
    this.options = { ...options };
    this.fetcher = options.fetch ?? ((input, init) => fetch(input, init));
    this.route = new Route(options.baseUrl);
  }

  /** Calls `listener(operationId, body, waitMs)` each time a call is
   * refused by a per-minute limit (429 with `Retry-After`) and will be sent
   * again after `waitMs`; `body` is the refusal's (`limit_type`, `limit`,
   * `tier`). Answers a function that stops it. */
  onRateLimited(listener: LimitListener): () => void {
    this.limitListeners.add(listener);
    return () => this.limitListeners.delete(listener);
  }

  /** POST /tasks: create 1 to 25 tasks, each with a client-minted id. */
  override async create_tasks(body: CreateTasks, options?: CallOptions): Promise<CreateAnswer> {
    const minted = await withMintedIds(body);
    return (await this.invoke(OPERATIONS.create_tasks, [], undefined, minted, options, true)) as CreateAnswer;
  }

  /** POST /tasks/update, sent again when its connection breaks: the
   * worker's items all carry their `lease_id`, so a repeat cannot apply
   * twice. */
  async sendUpdates(
    items: components["schemas"]["TaskUpdate"][],
    options?: CallOptions,
  ): Promise<components["schemas"]["UpdateResult"][]> {
    const answer = (await this.invoke(OPERATIONS.update_tasks, [], undefined, { updates: items }, options, true)) as
      components["schemas"]["UpdateAnswer"];
    return answer.results;
  }

  /** POST /tasks/wait: answers as soon as all (or any) of 1 to 25 tasks
   * are finished, or after `waitSeconds` (0 to 30) with `done: false`. */
  wait(taskIds: readonly string[], options: WaitOptions = {}): Promise<WaitAnswer> {
    const { until = "all", waitSeconds = 30, ...call } = options;
    return this.wait_for_tasks({ task_ids: [...taskIds], until, wait_seconds: waitSeconds }, call);
  }

  /** Waits again and again until all (or any) of the tasks are finished or
   * `timeoutMs` has passed; answers the last answer, whose `done` says
   * which. */
  async waitUntilDone(taskIds: readonly string[], options: WaitUntilDoneOptions = {}): Promise<WaitAnswer> {
    const { until = "all", timeoutMs, ...call } = options;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const answer = await this.wait(taskIds, { ...call, until, waitSeconds: nextWaitSeconds(deadline, Date.now()) });
      if (waitingIsOver(answer, deadline, Date.now())) return answer;
    }
  }

  /** GET /events: the org's task transitions, in order, for as long as it
   * is iterated (or until `signal` aborts), reconnecting by itself without
   * a gap or a repeat. `since`: start after that event id (default: with
   * the next event); `types` and `taskIds` keep only those. */
  events(options: EventsOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    return readEvents(
      {
        baseUrl: this.options.baseUrl,
        apiKey: this.options.apiKey,
        timeoutMs: this.options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        retryForMs: this.options.retryForMs ?? DEFAULT_RETRY_FOR_MS,
        fetch: this.fetcher,
      },
      options,
    );
  }

  protected async invoke(
    operation: OperationSpec,
    path: readonly string[],
    query: Record<string, unknown> | undefined,
    body: unknown,
    options: CallOptions | undefined,
    retryInDoubt = false,
  ): Promise<unknown> {
    const headers = this.headers(operation, body !== undefined);
    const timeoutMs = (this.options.timeoutMs ?? DEFAULT_TIMEOUT_MS) + waitSeconds(operation, body, query) * 1000;
    const deadline = Date.now() + (this.options.retryForMs ?? DEFAULT_RETRY_FOR_MS);
    const allows = (wait: number): boolean => Date.now() + wait < deadline;
    let inDoubt = false;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    for (;;) {
      const base = this.route.baseFor(operation);
      const url = buildUrl(base, operation, path) + queryString(query);
      const timer = withTimeout(timeoutMs, options?.signal);
      let response: Response;
      try {
        response = await this.fetcher(url, { method: operation.method, headers, body: payload, signal: timer.signal });
      } catch (error) {
        timer.done();
        if (options?.signal?.aborted) throw error;
        if (this.route.lost(base)) {
          // As the node in front would have answered 503 (the org moving
          // on) for a call under way at an owner that died: sent again at
          // once through the base URL.
          if (!neverSent(error)) inDoubt = true;
          if (!allows(0)) throw error;
          continue;
        }
        if (!neverSent(error)) {
          inDoubt = true;
          if (!(repeatable(operation) || retryInDoubt)) throw new InDoubt(operation.id, error);
        }
        if (!allows(PAUSE_MS)) throw error;
        await sleep(PAUSE_MS, options?.signal);
        continue;
      }
      this.route.heard(operation, base, response.status, response.headers);
      try {
        const wait = retryDelayMs(response.status, response.headers);
        if (wait !== undefined && allows(wait)) {
          // A 503 may come from a node that lost the org while the call was under way there.
          inDoubt = inDoubt || response.status !== 429;
          if (response.status === 429) {
            const refused = await errorBody(response);
            for (const listener of [...this.limitListeners]) listener(operation.id, refused, wait);
          } else {
            await response.body?.cancel();
          }
          await sleep(wait, options?.signal);
          continue;
        }
        if (operation.id === "create_tasks" && inDoubt && response.status === 409) {
          const refused = await errorBody(response);
          const rebuilt =
            typeof refused["task_id"] === "string"
              ? await this.resolveRepeatedCreate(body as CreateTasks, options)
              : undefined;
          if (rebuilt) return rebuilt;
          throw new ApiError(409, refused);
        }
        return await decode(operation, response);
      } finally {
        timer.done();
      }
    }
  }

  private async resolveRepeatedCreate(
    body: CreateTasks,
    options: CallOptions | undefined,
  ): Promise<CreateAnswer | undefined> {
    const ids = body.tasks.map((item) => item.task_id ?? "");
    const found = await this.get_tasks({ task_ids: ids }, options);
    return answerFromExisting(body, found);
  }

  private headers(operation: OperationSpec, hasBody: boolean): Record<string, string> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (hasBody) headers["content-type"] = "application/json";
    if (operation.auth === "key") {
      if (!this.options.apiKey) throw new UsageError(`${operation.id} needs an apiKey`);
      headers["x-api-key"] = this.options.apiKey;
    } else if (operation.auth === "operator") {
      if (!this.options.adminToken) throw new UsageError(`${operation.id} needs an adminToken (the operator token)`);
      headers["authorization"] = `Bearer ${this.options.adminToken}`;
    }
    return headers;
  }
}
