import http from "node:http";
import type { AddressInfo } from "node:net";
import { verifySignature } from "../../src/webhooks/signature.js";
import { until } from "./expect.js";

export interface Received {
  at: number;
  /** The request's path and query. */
  path: string;
  headers: http.IncomingHttpHeaders;
  rawBody: string;
  /** The signature checked against the secret, in constant time, on the raw body before parsing. */
  signatureValid: boolean;
  body: { event: string; timestamp: string; data: Record<string, unknown> };
}

/** How to answer one request: a status (default 200), or "hang" to never answer. */
export type Reply = number | "hang" | { status: number; headers?: Record<string, string>; body?: string };

/** A real webhook receiver on loopback. `reply` decides each answer; every request is kept. */
export class Receiver {
  readonly received: Received[] = [];
  reply: (request: Received) => Reply = () => 200;
  private readonly server: http.Server;
  private readonly hanging = new Set<http.ServerResponse>();

  private constructor(private readonly secret: () => string) {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const rawBody = Buffer.concat(chunks).toString("utf8");
        const signatureValid = verifySignature(this.secret(), rawBody, header(req.headers["x-webhook-signature"]));
        const entry: Received = {
          at: Date.now(),
          path: req.url ?? "",
          headers: req.headers,
          rawBody,
          signatureValid,
          body: JSON.parse(rawBody),
        };
        this.received.push(entry);
        const reply = this.reply(entry);
        if (reply === "hang") {
          this.hanging.add(res);
          return;
        }
        const { status, headers, body } = typeof reply === "number" ? { status: reply, headers: {}, body: "ok" } : reply;
        res.writeHead(status, headers);
        res.end(body ?? "");
      });
    });
  }

  /** `secret` is read at each request, so a test can set it after creating the webhook. */
  static async start(secret: () => string): Promise<Receiver> {
    const receiver = new Receiver(secret);
    await new Promise<void>((resolve) => receiver.server.listen(0, "127.0.0.1", resolve));
    return receiver;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  /** Resolves once `count` requests have arrived (fails after timeoutMs). */
  async waitFor(count: number, timeoutMs = 10_000): Promise<Received[]> {
    await until(() => this.received.length >= count, timeoutMs, `${count} requests at the receiver`);
    return this.received;
  }

  async stop(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
