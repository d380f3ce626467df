// Watching an org without polling (CONTRACT §10): the rules of a loop of
// waits for tasks, and the event stream as an async iterable that outlives
// its connections.
//
// A stream ends when the server stops or the org moves to another node, and
// a connection may drop. The iterable then opens the stream again with
// `Last-Event-ID` set to the last event it handed out, so the server
// replays exactly what came after it: whoever iterates sees every event
// once and in order. An event whose end had not arrived when the
// connection went is not handed out; it comes again whole. Opening is
// retried as a call is (`retryDelayMs`: 429 with `Retry-After`, 503, failed
// connections, within `retryForMs`, counted afresh after every stream that
// opened); between two connections the client pauses for the stream's
// `retry:` when it sent one. A connection that hears nothing, not even the
// server's keep-alive comment, for the timeout is given up and opened again.

import type { components } from "./schema.js";
import { SseParser, type SseMessage } from "./sse.js";
import {
  ApiError,
  buildUrl,
  decode,
  PAUSE_MS,
  queryString,
  retryDelayMs,
  sleep,
  UsageError,
  type OperationSpec,
} from "./transport.js";

/** The webhook body of a task's transition (`EventBody`, whose `data` on
 * the stream is always a `TransitionData`). */
export interface StreamBody {
  type: components["schemas"]["EventKind"];
  timestamp: string;
  data: components["schemas"]["TransitionData"];
}
type WaitAnswer = components["schemas"]["WaitAnswer"];

/** One event of the org's stream. */
export interface StreamEvent {
  /** The event id, rising within the org. */
  id: number;
  /** `task.created`, `task.completed`, … or `task.status_changed` for a change without a more specific type. */
  type: string;
  /** The webhook body: `{type, timestamp, data: {org_id, task_id, from_status, to_status, agent_id}}`. */
  data: StreamBody;
}

export interface EventsOptions {
  /** Start after this event id (default: with the next event). */
  since?: number;
  /** Keep only these types (comma-separated or a list). */
  types?: string | readonly string[];
  /** Keep only these tasks (up to 100). */
  taskIds?: string | readonly string[];
  /** Ends the iteration (quietly) and closes the stream. */
  signal?: AbortSignal;
}

export const EVENTS: OperationSpec = { id: "watch_events", method: "GET", path: "/events", auth: "key", answer: "text" };
/** The server sends a comment this often while nothing happens. */
export const KEEP_ALIVE_MS = 15_000;
/** The longest wait one `POST /tasks/wait` may ask for. */
export const MAX_WAIT_SECONDS = 30;
/** The name of an event sent without `event:`. */
export const UNNAMED = "task.status_changed";

export function toEvent(message: SseMessage): StreamEvent {
  if (message.id === undefined || !/^[0-9]+$/.test(message.id)) {
    throw new TypeError(`an event without an event id (${String(message.id)}): not a taskq stream`);
  }
  return { id: Number(message.id), type: message.event ?? UNNAMED, data: JSON.parse(message.data) as StreamBody };
}

/** How long the next wait of a loop with this deadline asks for: whole
 * seconds, rounded up, so the loop ends at most a second late. */
export function nextWaitSeconds(deadline: number | undefined, now: number): number {
  if (deadline === undefined) return MAX_WAIT_SECONDS;
  return Math.max(0, Math.min(MAX_WAIT_SECONDS, Math.ceil((deadline - now) / 1000)));
}

/** Whether a loop of waits stops at this answer: done, the deadline has
 * passed, or none of the ids is a task (nothing can change then). */
export function waitingIsOver(answer: WaitAnswer, deadline: number | undefined, now: number): boolean {
  return answer.done || answer.tasks.length === 0 || (deadline !== undefined && now >= deadline);
}

function listed(values: string | readonly string[] | undefined): string | undefined {
  return values === undefined || typeof values === "string" ? values : values.join(",");
}

/** What a stream is read with: the client's settings and its `fetch`. */
export interface StreamSource {
  baseUrl: string;
  apiKey: string | undefined;
  timeoutMs: number;
  retryForMs: number;
  fetch: typeof fetch;
}

/** A failed connection or read, which the stream rides out. */
class Broken {
  constructor(readonly error: unknown) {}
}

async function attempt<T>(promise: Promise<T>): Promise<T | Broken> {
  try {
    return await promise;
  } catch (error) {
    return new Broken(error);
  }
}

export async function* readEvents(source: StreamSource, options: EventsOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
  if (!source.apiKey) throw new UsageError("events needs an apiKey");
  const { signal } = options;
  const url = buildUrl(source.baseUrl, EVENTS, []);
  const filters = { types: listed(options.types), task_id: listed(options.taskIds) };
  // The server holds a quiet stream open with a comment every 15 s.
  const idleMs = Math.max(source.timeoutMs, 2 * KEEP_ALIVE_MS);
  let lastId: number | undefined;
  let retryMs: number | undefined;
  let deadline = Date.now() + source.retryForMs;
  for (;;) {
    if (signal?.aborted) return;
    const headers: Record<string, string> = { accept: "text/event-stream", "cache-control": "no-cache", "x-api-key": source.apiKey };
    if (lastId !== undefined) headers["last-event-id"] = String(lastId);
    const query = lastId === undefined ? { ...filters, since: options.since } : filters;
    const connection = new AbortController();
    const onAbort = (): void => connection.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let idle: ReturnType<typeof setTimeout> | undefined;
    const quiet = <T>(promise: Promise<T>): Promise<T | Broken> => {
      idle = setTimeout(() => connection.abort(new Error(`nothing heard for ${idleMs} ms`)), idleMs);
      return attempt(promise).finally(() => clearTimeout(idle));
    };
    let pause = retryMs ?? PAUSE_MS;
    let failure: Broken | undefined;
    try {
      const response = await quiet(source.fetch(url + queryString(query), { headers, signal: connection.signal }));
      if (response instanceof Broken) {
        failure = response;
      } else if (response.status !== 200) {
        const wait = retryDelayMs(response.status, response.headers);
        if (wait === undefined || Date.now() + wait >= deadline) {
          if (response.status >= 300) await decode(EVENTS, response);
          throw new ApiError(response.status, { error: `the stream answered ${response.status}` });
        }
        await response.body?.cancel();
        pause = wait;
      } else if (response.body) {
        deadline = Date.now() + source.retryForMs;
        const parser = new SseParser();
        const reader = response.body.getReader();
        try {
          for (;;) {
            const read = await quiet(reader.read());
            if (read instanceof Broken) {
              failure = read;
              break;
            }
            if (read.done) break;
            const messages = parser.feed(read.value);
            if (parser.retryMs !== undefined) retryMs = parser.retryMs;
            for (const message of messages) {
              const event = toEvent(message);
              lastId = event.id;
              yield event;
            }
          }
        } finally {
          reader.cancel().catch(() => undefined);
        }
        pause = retryMs ?? PAUSE_MS;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      connection.abort();
    }
    if (signal?.aborted) return;
    if (failure && Date.now() + pause >= deadline) throw failure.error;
    try {
      await sleep(pause, signal);
    } catch {
      return;
    }
  }
}
