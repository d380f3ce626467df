// The event stream's parser and the wait loop's rules, without a server.

import assert from "node:assert/strict";
import { test } from "node:test";
import { SseParser, type SseMessage } from "../src/sse.js";
import { nextWaitSeconds, toEvent, UNNAMED, waitingIsOver } from "../src/watch.js";

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

const STREAM = bytes(
  ": keep-alive\r\n" +
    "\r\n" +
    "retry: 2500\r\n" +
    "id: 1\r\n" +
    "event: task.created\r\n" +
    'data: {"type":"task.created",\r\n' +
    'data: "n":"é"}\r\n' +
    "\r\n" +
    "event: ignored, it has no data\n" +
    "\n" +
    "id: 2\n" +
    "data:no space\n" +
    "data\n" +
    "unknown: field\n" +
    "\n" +
    "data: keeps id 2\r" +
    "\r" +
    "id: 3\n" +
    "data: never finished",
);
const EXPECTED: SseMessage[] = [
  { event: "task.created", data: '{"type":"task.created",\n"n":"é"}', id: "1" },
  { event: undefined, data: "no space\n", id: "2" },
  { event: undefined, data: "keeps id 2", id: "2" },
];

function feedAll(parser: SseParser, chunks: Uint8Array[]): SseMessage[] {
  return chunks.flatMap((chunk) => parser.feed(chunk));
}

test("a stream read whole gives its finished messages", () => {
  const parser = new SseParser();
  assert.deepEqual(feedAll(parser, [STREAM]), EXPECTED);
  assert.equal(parser.retryMs, 2500);
  // The unfinished message set the last id, but was not handed out.
  assert.equal(parser.lastId, "3");
});

test("a chunk may end anywhere", () => {
  // Inside a line, between CR and LF, inside the two bytes of "é".
  for (let at = 1; at < STREAM.length; at += 1) {
    assert.deepEqual(feedAll(new SseParser(), [STREAM.subarray(0, at), STREAM.subarray(at)]), EXPECTED, `split at ${at}`);
  }
  const single = Array.from({ length: STREAM.length }, (_, i) => STREAM.subarray(i, i + 1));
  assert.deepEqual(feedAll(new SseParser(), single), EXPECTED);
});

test("a CRLF split between chunks ends one line", () => {
  // Read as two line ends, the LF would make a blank line and split the message.
  assert.deepEqual(feedAll(new SseParser(), [bytes("data: a\r"), bytes("\ndata: b\r\n\r\n")]), [
    { event: undefined, data: "a\nb", id: undefined },
  ]);
  assert.deepEqual(feedAll(new SseParser(), [bytes("data: a\r"), bytes(""), bytes("\n"), bytes("\r\n")]), [
    { event: undefined, data: "a", id: undefined },
  ]);
});

test("lone CRs end lines, and odd fields are read as the standard says", () => {
  assert.deepEqual(feedAll(new SseParser(), [bytes("event: x\rdata: 1\rdata: 2\r\r")]), [{ event: "x", data: "1\n2", id: undefined }]);
  const parser = new SseParser();
  const chunks = [bytes("\ufeffid: 7\n"), bytes("data: a\n\n"), bytes("id: 8\u00009\nretry: 1.5\ndata:  two spaces\n\n")];
  assert.deepEqual(feedAll(parser, chunks), [
    { event: undefined, data: "a", id: "7" },
    { event: undefined, data: " two spaces", id: "7" },
  ]);
  assert.equal(parser.retryMs, undefined);
});

test("events are typed from their messages", () => {
  assert.deepEqual(toEvent({ event: "task.completed", data: '{"type":"task.completed"}', id: "41" }), {
    id: 41,
    type: "task.completed",
    data: { type: "task.completed" },
  });
  assert.equal(toEvent({ event: undefined, data: "{}", id: "42" }).type, UNNAMED);
  assert.throws(() => toEvent({ event: undefined, data: "{}", id: undefined }), TypeError);
});

test("a loop of waits asks for what is left, rounded up, and stops when it should", () => {
  assert.equal(nextWaitSeconds(undefined, 100_000), 30);
  assert.equal(nextWaitSeconds(200_000, 100_000), 30);
  assert.equal(nextWaitSeconds(110_200, 100_000), 11);
  assert.equal(nextWaitSeconds(100_000, 100_000), 0);
  assert.equal(nextWaitSeconds(90_000, 100_000), 0);
  const task = { task_id: "t", status: "pending" as const, updated_at: "2026-01-01T00:00:00Z" };
  const running = { done: false, tasks: [task], not_found: [] };
  assert.equal(waitingIsOver(running, undefined, 0), false);
  assert.equal(waitingIsOver(running, 10, 9), false);
  assert.equal(waitingIsOver(running, 10, 10), true);
  assert.equal(waitingIsOver({ ...running, done: true }, undefined, 0), true);
  assert.equal(waitingIsOver({ done: false, tasks: [], not_found: ["x"] }, undefined, 0), true);
});
