import http from "node:http";
import type { AddressInfo } from "node:net";
import { Code, RpcError } from "../../platform/errors.js";
import type { Logger } from "../../platform/logger.js";
import { writeJson, writeRpcError } from "./responses.js";
import type { Transcoder } from "./transcoder.js";

export interface HttpServer {
  port: number;
  /** Stops accepting connections, waits up to graceMs for open requests, then closes the rest. */
  shutdown(graceMs: number): Promise<void>;
}

export async function startHttpServer(
  transcoder: Transcoder,
  host: string,
  port: number,
  logger: Logger,
  isServing: () => boolean,
): Promise<HttpServer> {
  const server = http.createServer({ keepAliveTimeout: 5_000, requestTimeout: 60_000 }, (req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    route(req, res, url).catch((error: unknown) => {
      logger.error({ event: "http_internal_error", path: url.pathname, err: error }, "unexpected HTTP error");
      writeRpcError(res, new RpcError(Code.INTERNAL, "internal error", { reason: "INTERNAL" }));
    });
  });

  async function route(req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
    if (url.pathname === "/healthz") {
      const serving = isServing();
      writeJson(res, serving ? 200 : 503, { status: serving ? "SERVING" : "NOT_SERVING" });
      return;
    }
    if (await transcoder.handle(req, res, url)) return;
    writeRpcError(
      res,
      new RpcError(Code.NOT_FOUND, `no route for ${req.method} ${url.pathname}`, { reason: "NO_ROUTE" }),
    );
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });

  return {
    port: (server.address() as AddressInfo).port,
    shutdown: (graceMs) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.closeAllConnections();
        }, graceMs);
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}
