// How a call reaches the server: URLs, authentication, answers and errors,
// and when a call is sent again.
//
// A call is sent again, after the server's `Retry-After`, when the answer
// is 429 with `Retry-After` (a per-minute limit: nothing was written) or
// 503 (`org moving` while a cluster moves an org, `overloaded`, `store
// unavailable`), and after a short pause when the connection could not be
// made. A call whose connection broke after it was sent may have been
// applied: it is sent again only when that is harmless (reads, and creates,
// whose client-minted ids make a repeat a 409 the client resolves);
// otherwise `InDoubt` is thrown. Only `fetch` is used, so the same code runs
// in Node 18+ and in browsers.
//
// With several nodes whose operators named their public URLs, an answer
// that another node forwarded from the org's owner names the owner
// (`X-Taskq-Owner`): the client sends its org's calls there from then on,
// saving the hop, and goes back to `baseUrl` when the owner cannot be
// reached or answers 503 (the org moved). A call under way at an owner that
// broke the connection is sent again there, as the node in front would
// have answered it 503 had it forwarded the call. Operator calls and event
// streams always go to `baseUrl`.

export interface OperationSpec {
  readonly id: string;
  readonly method: string;
  readonly path: string;
  /** `key` (X-Api-Key), `operator` (the operator token) or `none`. */
  readonly auth: "key" | "operator" | "none";
  readonly answer: "json" | "text" | "empty";
}

export interface CallOptions {
  /** Aborts the call (and its retries). */
  signal?: AbortSignal;
}

export interface ClientOptions {
  baseUrl: string;
  apiKey?: string;
  /** The operator token, for `/admin/*` and `metrics`. */
  adminToken?: string;
  /** How long one request may take, long polls' `wait_seconds` added (default 60 s). */
  timeoutMs?: number;
  /** How long a call keeps being retried before its last error is thrown (default 300 s). */
  retryForMs?: number;
  /** Another `fetch` (a test's, or one with a proxy agent). */
  fetch?: typeof fetch;
}

/** The server answered with an error status (after any retries). */
export class ApiError extends Error {
  readonly status: number;
  /** The JSON error body; its `error` string says what went wrong. */
  readonly body: { error: string; [key: string]: unknown };
  readonly retryAfter: number | undefined;

  constructor(status: number, body: { error: string; [key: string]: unknown }, retryAfter?: number) {
    super(`${status}: ${body.error}`);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
    this.retryAfter = retryAfter;
  }
}

/** The client was used wrongly (a missing key or token, a wrong number of
 * path parameters): retrying cannot help. */
export class UsageError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** The connection broke after the call was sent: the server may or may not
 * have applied it, and repeating it could apply it twice. */
export class InDoubt extends Error {
  readonly operation: string;

  constructor(operation: string, cause: unknown) {
    super(`${operation}: the connection broke after the call was sent (${String(cause)})`, { cause });
    this.name = "InDoubt";
    this.operation = operation;
  }
}

export const MAX_RETRY_WAIT_MS = 30_000;
export const PAUSE_MS = 500;
const READ_ONLY_POSTS = new Set(["get_tasks", "search_tasks", "wait_for_tasks"]);
/** Long polls whose `wait_seconds` defaults to 30 when left out. */
const WAITS_BY_DEFAULT = new Set(["wait_for_tasks"]);

export function repeatable(operation: OperationSpec): boolean {
  return operation.method === "GET" || READ_ONLY_POSTS.has(operation.id);
}

export function retryAfterSeconds(headers: Headers): number | undefined {
  const value = headers.get("retry-after");
  if (value === null) return undefined;
  const seconds = Number(value.trim());
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

/** How long to wait before sending a call again after this answer, or
 * `undefined` when the answer is final. */
export function retryDelayMs(status: number, headers: Headers): number | undefined {
  const after = retryAfterSeconds(headers);
  if (status === 429) {
    // Monthly allowances and tier limits carry no Retry-After.
    return after === undefined ? undefined : Math.min(after * 1000, MAX_RETRY_WAIT_MS);
  }
  if (status === 503) return after === undefined ? PAUSE_MS : Math.min(after * 1000, MAX_RETRY_WAIT_MS);
  if (status === 502 || status === 504) return PAUSE_MS;
  return undefined;
}

/** Whether a failed fetch never reached the server (nothing was sent). */
export function neverSent(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  const code = typeof cause?.code === "string" ? cause.code : undefined;
  return code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "UND_ERR_CONNECT_TIMEOUT";
}

/** The header that names the org's owner node, on an answer forwarded from it. */
export const OWNER_HEADER = "x-taskq-owner";
/** How long an owner that could not be reached is not followed again. */
export const SHUN_FOR_MS = 30_000;

/** The owner URL an answer names, when it is an http(s) URL of a host. */
export function ownerHint(value: string | null | undefined): string | undefined {
  if (!value) return undefined;
  let url: URL;
  try {
    url = new URL(value.trim());
  } catch {
    return undefined;
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname || url.search || url.hash) {
    return undefined;
  }
  return value.trim().replace(/\/+$/, "");
}

/** Where a client's calls for its org go: `baseUrl`, or the owner node the
 * last forwarded answer named. An owner this client could not reach is not
 * followed again for `SHUN_FOR_MS` (its public URL may be out of this
 * client's reach), so a call costs at most one failed attempt. */
export class Route {
  readonly baseUrl: string;
  owner: string | undefined;
  private readonly unreachable = new Map<string, number>();

  constructor(baseUrl: string) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
  }

  baseFor(operation: OperationSpec): string {
    return operation.auth === "key" && this.owner !== undefined ? this.owner : this.baseUrl;
  }

  /** After an answer from `base`: follow a hint, or leave an owner that no
   * longer serves the org. */
  heard(operation: OperationSpec, base: string, status: number, headers: Headers, now = Date.now()): void {
    if (operation.auth !== "key") return;
    const hint = ownerHint(headers.get(OWNER_HEADER));
    if (hint !== undefined && (this.unreachable.get(hint) ?? 0) <= now) {
      this.owner = hint;
    } else if (status === 503 && base === this.owner) {
      this.owner = undefined;
    }
  }

  /** After a failed fetch to `base`: whether it was the owner, which is
   * left (the next attempt goes to `baseUrl` at once). */
  lost(base: string, now = Date.now()): boolean {
    if (this.owner === undefined || base !== this.owner) return false;
    this.unreachable.set(base, now + SHUN_FOR_MS);
    this.owner = undefined;
    return true;
  }
}

export function buildUrl(baseUrl: string, operation: OperationSpec, path: readonly string[]): string {
  const names = operation.path.split("/").filter((p) => p.startsWith("{"));
  if (names.length !== path.length) {
    throw new UsageError(`${operation.id} takes ${names.length} path parameters, got ${path.length}`);
  }
  let url = operation.path;
  names.forEach((name, i) => {
    url = url.replace(name, encodeURIComponent(path[i] as string));
  });
  return baseUrl.replace(/\/+$/, "") + url;
}

export function queryString(query: Record<string, unknown> | undefined): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value === undefined || value === null) continue;
    params.set(name, Array.isArray(value) ? value.join(",") : String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A signal that aborts when `signal` does or after `ms` (AbortSignal.any
 * is not in Node 18). */
export function withTimeout(ms: number, signal?: AbortSignal): { signal: AbortSignal; done: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error(`timed out after ${ms} ms`)), ms);
  const onAbort = (): void => controller.abort(signal?.reason);
  if (signal?.aborted) controller.abort(signal.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    done: () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    },
  };
}

/** A long poll (`wait_seconds`) is held by the server that long on top. */
export function waitSeconds(operation: OperationSpec, body: unknown, query: Record<string, unknown> | undefined): number {
  let wait: number | undefined;
  for (const source of [body, query]) {
    const value = (source as { wait_seconds?: unknown } | undefined)?.wait_seconds;
    if (typeof value === "number") wait = Math.max(wait ?? 0, value);
  }
  return wait ?? (WAITS_BY_DEFAULT.has(operation.id) ? 30 : 0);
}

export async function errorBody(response: Response): Promise<{ error: string; [key: string]: unknown }> {
  const text = await response.text();
  try {
    const body: unknown = JSON.parse(text);
    if (body && typeof body === "object" && typeof (body as { error?: unknown }).error === "string") {
      return body as { error: string };
    }
  } catch {
    // not JSON: the text is the error
  }
  return { error: text || response.statusText };
}

export async function decode(operation: OperationSpec, response: Response): Promise<unknown> {
  if (response.status >= 300) {
    throw new ApiError(response.status, await errorBody(response), retryAfterSeconds(response.headers));
  }
  if (operation.answer === "empty") {
    await response.body?.cancel();
    return undefined;
  }
  const text = await response.text();
  if (operation.answer === "text") return text;
  return text ? JSON.parse(text) : null;
}
