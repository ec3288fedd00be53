import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "../src/client/index.js";

/**
 * An HTTP/2 server that answers every call with a gRPC error and keeps the session of the first
 * call, so a test can read what the client's connection told the server about its receive window.
 */
async function listening(): Promise<{ address: string; session: Promise<http2.Http2Session>; close(): Promise<void> }> {
  const server = http2.createServer();
  const session = new Promise<http2.Http2Session>((resolve) =>
    server.on("stream", (stream) => {
      stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12", "grpc-message": "unimplemented" }, { endStream: true });
      resolve(stream.session!);
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    session,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe("the client's channel", () => {
  const closing: Array<() => unknown> = [];
  afterEach(async () => {
    for (const close of closing.splice(0)) await close();
  });

  it("opens its connection's receive window to 4 MiB, so answers to many calls in flight need not wait for it", async () => {
    const server = await listening();
    closing.push(server.close);
    const client = createClient({ address: server.address });
    closing.push(() => client.close());
    await expect(client.namespaces.getNamespace({ name: "any" })).rejects.toThrow(/unimplemented/);
    const session = await server.session;
    // What the server may send on the connection, and on each new stream, before the client reads
    // (grpc-js's own default is 65,535 bytes for both).
    expect(session.state.remoteWindowSize).toBe(4 * 2 ** 20);
    expect(session.remoteSettings.initialWindowSize).toBe(4 * 2 ** 20);
  });

  it("takes the caller's channel options over its own", async () => {
    const server = await listening();
    closing.push(server.close);
    const client = createClient({ address: server.address, channelOptions: { "grpc-node.flow_control_window": 1 << 20 } });
    closing.push(() => client.close());
    await expect(client.namespaces.getNamespace({ name: "any" })).rejects.toThrow(/unimplemented/);
    expect((await server.session).remoteSettings.initialWindowSize).toBe(1 << 20);
  });
});
