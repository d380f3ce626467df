// A TCP proxy for HTTP/1.1 that can swallow the answer to one request: it
// forwards the request to the server, reads the whole answer, and closes
// the client's connection instead of passing it on, as a network that
// broke after the server applied the call.

import net from "node:net";

/** One HTTP message (head and Content-Length body) at the start of `buffer`. */
function message(buffer: Buffer): { message: Buffer; rest: Buffer } | undefined {
  const end = buffer.indexOf("\r\n\r\n");
  if (end < 0) return undefined;
  const head = buffer.subarray(0, end).toString("latin1");
  const match = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  const length = match ? Number(match[1]) : 0;
  const total = end + 4 + length;
  if (buffer.length < total) return undefined;
  return { message: buffer.subarray(0, total), rest: buffer.subarray(total) };
}

export class DroppingProxy {
  dropped = 0;
  url = "";
  private readonly server: net.Server;

  constructor(target: string, private readonly drop: string) {
    const { hostname, port } = new URL(target);
    this.server = net.createServer((client) => {
      const upstream = net.connect(Number(port), hostname);
      let fromClient: Buffer = Buffer.alloc(0);
      let fromServer: Buffer = Buffer.alloc(0);
      const requests: string[] = [];
      client.on("data", (chunk) => {
        fromClient = Buffer.concat([fromClient, chunk]);
        for (let found = message(fromClient); found; found = message(fromClient)) {
          requests.push(found.message.toString("latin1", 0, 64));
          upstream.write(found.message);
          fromClient = found.rest;
        }
      });
      upstream.on("data", (chunk) => {
        fromServer = Buffer.concat([fromServer, chunk]);
        for (let found = message(fromServer); found; found = message(fromServer)) {
          fromServer = found.rest;
          const request = requests.shift() ?? "";
          if (request.startsWith(this.drop) && this.dropped === 0) {
            this.dropped += 1;
            client.destroy();
            upstream.destroy();
            return;
          }
          client.write(found.message);
        }
      });
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
      client.on("close", () => upstream.destroy());
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
    return this;
  }

  close(): void {
    this.server.close();
  }
}

/** A TCP proxy that ends every event stream it passes after `keep` events:
 * `clean` ends the chunked answer as a server that stopped would, otherwise
 * the connection breaks a few bytes into the next event, as a network that
 * failed mid-event. Other answers pass untouched. */
export class StreamCuttingProxy {
  /** The next event's first bytes on the wire: its chunk size line and `id: …`. */
  static readonly PARTIAL = 12;
  cuts = 0;
  url = "";
  private readonly server: net.Server;

  constructor(target: string, private readonly keep: number, private readonly clean: boolean) {
    const { hostname, port } = new URL(target);
    this.server = net.createServer((client) => {
      const upstream = net.connect(Number(port), hostname);
      let seen: Buffer = Buffer.alloc(0);
      let sent = 0;
      client.on("data", (chunk) => upstream.write(chunk));
      upstream.on("data", (chunk) => {
        if (client.destroyed) return;
        seen = Buffer.concat([seen, chunk]);
        const limit = this.limit(seen);
        const end = limit === undefined ? seen.length : Math.min(seen.length, limit);
        client.write(seen.subarray(sent, end));
        sent = end;
        if (limit !== undefined && sent === limit) {
          this.cuts += 1;
          upstream.destroy();
          if (this.clean) client.end("0\r\n\r\n");
          else client.destroy();
        }
      });
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.end());
    });
  }

  /** Where the answer is cut, once the `keep`-th event has come. */
  private limit(seen: Buffer): number | undefined {
    const headEnd = seen.indexOf("\r\n\r\n");
    if (headEnd < 0 || !seen.subarray(0, headEnd).toString("latin1").toLowerCase().includes("text/event-stream")) {
      return undefined;
    }
    let at = headEnd;
    for (let i = 0; i < this.keep; i += 1) {
      at = seen.indexOf("\n\n", at + 1);
      if (at < 0) return undefined;
    }
    // Past the event's blank line and its chunk's CRLF.
    const end = at + 2 + 2;
    return this.clean ? end : end + StreamCuttingProxy.PARTIAL;
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
    return this;
  }

  close(): void {
    this.server.close();
  }
}
