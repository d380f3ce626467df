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
