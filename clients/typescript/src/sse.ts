// Server-Sent Events, read as the HTML standard's parser reads them, from
// bytes as they arrive: a chunk may end anywhere (inside a line, between a
// CR and its LF, inside a UTF-8 character). The format is a line protocol,
// so a small parser keeps the client free of a dependency for it (and works
// where `EventSource` cannot send a key).
//
// Lines end with CRLF, LF or CR. `:` starts a comment; `field: value` sets
// a field (one space after the colon is dropped; a line without a colon is
// a field with an empty value). `data` lines add up, joined by LF; `event`
// names the message; `id` sets the last event id, which lasts into the
// messages after it; `retry` (digits only) is the reconnection time. A
// blank line ends a message, which is passed on when it has data. A
// message still open when the stream ends is dropped: it was never
// finished.

/** One message of the stream, as sent. */
export interface SseMessage {
  /** The `event:` field, or undefined for an unnamed message. */
  event: string | undefined;
  data: string;
  /** The last event id when the message ended (it may come from an earlier message). */
  id: string | undefined;
}

const LINE_END = /\r\n|\r|\n/g;

export class SseParser {
  /** The reconnection time the stream asked for, in milliseconds. */
  retryMs: number | undefined;
  lastId: string | undefined;
  // A leading byte order mark is dropped by the decoder.
  private readonly decoder = new TextDecoder("utf-8");
  private pending = "";
  /** The previous chunk ended with CR: an LF starting this one belongs to it. */
  private afterCr = false;
  private event: string | undefined;
  private data: string[] = [];

  /** The messages that `chunk` finishes. */
  feed(chunk: Uint8Array): SseMessage[] {
    let text = this.decoder.decode(chunk, { stream: true });
    if (!text) return [];
    if (this.afterCr && text.startsWith("\n")) text = text.slice(1);
    this.afterCr = false;
    const buffer = this.pending + text;
    const messages: SseMessage[] = [];
    let start = 0;
    for (const end of buffer.matchAll(LINE_END)) {
      const message = this.line(buffer.slice(start, end.index));
      if (message) messages.push(message);
      start = end.index + end[0].length;
      if (end[0] === "\r" && start === buffer.length) this.afterCr = true;
    }
    this.pending = buffer.slice(start);
    return messages;
  }

  private line(line: string): SseMessage | undefined {
    if (!line) return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id") {
      if (!value.includes("\0")) this.lastId = value;
    } else if (field === "retry") {
      if (/^[0-9]+$/.test(value)) this.retryMs = Number(value);
    }
    return undefined;
  }

  private dispatch(): SseMessage | undefined {
    const { event, data } = this;
    this.event = undefined;
    this.data = [];
    if (data.length === 0) return undefined;
    return { event: event || undefined, data: data.join("\n"), id: this.lastId };
  }
}
