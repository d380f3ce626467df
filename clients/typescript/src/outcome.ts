// What a handler's result becomes: the update item that finishes its task.
//
// Resolving with an object (or nothing) completes the task with that
// output and the note `done`; resolving with `new Done(output, note)` sets
// both; throwing `new Fail(note, output)` fails it with those; any other
// error fails it with the error's name and message as the note and its
// stack in the output.

import type { components } from "./schema.js";

export type UpdateItem = components["schemas"]["TaskUpdate"];
export type Output = Record<string, unknown>;

/** The server takes notes and outputs up to 65,536 bytes (CONTRACT §5). */
export const MAX_NOTE_CHARS = 2000;
export const MAX_STACK_CHARS = 32000;
export const RELEASE_NOTE = "released by worker";

/** A handler's result that sets both the output and the note. */
export class Done {
  constructor(
    readonly output?: Output,
    readonly note: string = "done",
  ) {}
}

/** Thrown by a handler to fail its task with this note (and output). */
export class Fail extends Error {
  constructor(
    readonly note: string,
    readonly output?: Output,
  ) {
    super(note);
    this.name = "Fail";
  }
}

export function clip(text: string, limit: number): string {
  return text.length <= limit ? text : `${text.slice(0, limit - 1)}…`;
}

function finish(taskId: string, leaseId: string, status: "completed" | "failed", note: string, output?: Output): UpdateItem {
  const item: UpdateItem = { task_id: taskId, lease_id: leaseId, status, note: clip(note, MAX_NOTE_CHARS) };
  if (output !== undefined) item.output = output;
  return item;
}

export function completion(taskId: string, leaseId: string, result: unknown): UpdateItem {
  if (result instanceof Done) return finish(taskId, leaseId, "completed", result.note || "done", result.output);
  if (result === undefined || result === null) return finish(taskId, leaseId, "completed", "done");
  if (typeof result === "object" && !Array.isArray(result)) {
    return finish(taskId, leaseId, "completed", "done", result as Output);
  }
  return finish(
    taskId,
    leaseId,
    "failed",
    `TypeError: the handler resolved with ${Array.isArray(result) ? "an array" : typeof result}; resolve with an object, nothing or a Done`,
  );
}

export function failure(taskId: string, leaseId: string, error: unknown): UpdateItem {
  if (error instanceof Fail) return finish(taskId, leaseId, "failed", error.note || "failed", error.output);
  const name = error instanceof Error ? error.name : typeof error;
  const message = error instanceof Error ? error.message : String(error);
  const stack = error instanceof Error && error.stack ? error.stack : `${name}: ${message}`;
  return finish(taskId, leaseId, "failed", message ? `${name}: ${message}` : name, {
    error: { type: name, message: clip(message, MAX_NOTE_CHARS), stack: clip(stack, MAX_STACK_CHARS) },
  });
}

/** Gives a task back to `pending` when the worker stops before its handler. */
export function release(taskId: string, leaseId: string): UpdateItem {
  return { task_id: taskId, lease_id: leaseId, status: "pending", note: RELEASE_NOTE };
}

/** An update with nothing but the lease: the server extends it. */
export function renewal(taskId: string, leaseId: string): UpdateItem {
  return { task_id: taskId, lease_id: leaseId };
}

/** A finishing item the server refused (an output too large, say), turned
 * into a failure it will take. */
export function withoutOutput(item: UpdateItem, why: string): UpdateItem {
  return finish(item.task_id, item.lease_id ?? "", "failed", `the worker's update was refused: ${why}`);
}
