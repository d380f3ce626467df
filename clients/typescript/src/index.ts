// The taskq client: `Client`, one method per operation of the API, and
// `Worker`, which claims tasks and runs a handler on each while it keeps
// their leases.
//
//   import { Client, Worker } from "@taskq/client";
//   const client = new Client({ baseUrl: "http://127.0.0.1:8080", apiKey });
//   await new Worker({ client, handler: async (task) => ({ summary: task.title }), concurrency: 8 }).run();

export { Client, type LimitListener, type WaitOptions, type WaitUntilDoneOptions } from "./client.js";
export type { EventsOptions, StreamBody, StreamEvent } from "./watch.js";
export { ApiError, InDoubt, UsageError, type CallOptions, type ClientOptions } from "./transport.js";
export { Done, Fail, RELEASE_NOTE } from "./outcome.js";
export {
  Worker,
  jsonLogger,
  type ClaimedTask,
  type Handler,
  type JobContext,
  type Logger,
  type WorkerEvent,
  type WorkerOptions,
} from "./worker.js";
export { OPERATIONS } from "./operations.js";
export type { Answer, Body, OperationId, Query } from "./types.js";
export type * from "./schema.js";
