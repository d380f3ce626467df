// The request and answer types of each operation, read from the types
// openapi-typescript generated (src/schema.ts), so the methods in
// src/operations.ts name only operation ids.

import type { operations } from "./schema.js";

export type OperationId = keyof operations;

/** The JSON body an operation takes. */
export type Body<K extends OperationId> = operations[K] extends { requestBody?: infer R }
  ? NonNullable<R> extends { content: { "application/json": infer B } }
    ? B
    : never
  : never;

/** The query parameters an operation takes. */
export type Query<K extends OperationId> = operations[K] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;

type Success = 200 | 201 | 202 | 204 | 207;
type Responses<K extends OperationId> = operations[K]["responses"];
type Content<R> = R extends { content: { "application/json": infer A } }
  ? A
  : R extends { content: { "text/plain": infer T } }
    ? T
    : R extends { content: { "application/x-ndjson": infer T } }
      ? T
      : void;

/** What an operation answers on success (207's partial answers included). */
export type Answer<K extends OperationId> = {
  [S in keyof Responses<K>]: S extends Success ? Content<Responses<K>[S]> : never;
}[keyof Responses<K>];
