// The worker's writes (renewals, completions, failures, releases) sent
// together: items waiting when a request leaves go in it, up to the
// server's 25 per call, so a busy worker makes one request for many tasks.
//
// Each item's caller gets its own result item. An update answers per item
// (`lease lost` for one task does not fail the others); a refused call
// (400) of several items is sent again item by item, so one bad item
// cannot sink the rest. A call whose connection broke is sent again: every
// item carries its `lease_id`, so a repeat either applies as the first
// would have or answers `lease lost`.
//
// Items that finish a task (completions, failures, releases) leave before
// renewals: when the org's write limit lets few calls through, the work
// done lands first, and the renewals that wait meanwhile go together.

import type { UpdateItem } from "./outcome.js";
import type { components } from "./schema.js";
import { ApiError } from "./transport.js";

export type UpdateResult = components["schemas"]["UpdateResult"];

export const BATCH = 25;
/** Requests under way at once; more items wait for the next one. */
const SENDERS = 4;

interface Pending {
  item: UpdateItem;
  resolve: (result: UpdateResult) => void;
  reject: (error: unknown) => void;
}

/** 0 for an item that finishes a task, 1 for a renewal (no status). */
function rank(item: UpdateItem): number {
  return item.status === undefined ? 1 : 0;
}

export class Updates {
  private readonly queue: Pending[] = [];
  private sending = 0;
  private scheduled = false;

  constructor(private readonly send_: (items: UpdateItem[]) => Promise<UpdateResult[]>) {}

  /** Sends one item; resolves with its result item. */
  send(item: UpdateItem): Promise<UpdateResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      // Items sent in the same turn of the event loop go out together
      // (handlers finishing on timers each finish in a task of their own).
      if (!this.scheduled) {
        this.scheduled = true;
        setTimeout(() => {
          this.scheduled = false;
          this.pump();
        }, 0);
      }
    });
  }

  /** Whether nothing is queued or under way. */
  get idle(): boolean {
    return this.queue.length === 0 && this.sending === 0;
  }

  private pump(): void {
    // A stable sort: finishing items first, each kind in the order sent.
    this.queue.sort((a, b) => rank(a.item) - rank(b.item));
    while (this.sending < SENDERS && this.queue.length > 0) {
      const batch = this.queue.splice(0, BATCH);
      this.sending += 1;
      void this.deliver(batch).finally(() => {
        this.sending -= 1;
        this.pump();
      });
    }
  }

  private async deliver(batch: Pending[]): Promise<void> {
    let results: UpdateResult[];
    try {
      results = await this.send_(batch.map((p) => p.item));
    } catch (error) {
      if (error instanceof ApiError && error.status === 400 && batch.length > 1) {
        for (const one of batch) await this.deliver([one]);
        return;
      }
      for (const pending of batch) pending.reject(error);
      return;
    }
    batch.forEach((pending, i) => {
      const result = results[i];
      if (result === undefined) pending.reject(new Error("the update answered fewer results than items"));
      else pending.resolve(result);
    });
  }
}
