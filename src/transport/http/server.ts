import http from "node:http";
import type { AddressInfo } from "node:net";
import { Code, RpcError } from "../../platform/errors.js";
import type { Logger } from "../../platform/logger.js";
import { writeJson, writeRpcError } from "./responses.js";
import { requestIdOf } from "../call.js";
import type { RequestTarget, Transcoder } from "./transcoder.js";

/** A plain HTTP route (a page, a form post); answers and returns true when the request is its own. */
export type HttpRoute = (req: http.IncomingMessage, res: http.ServerResponse, target: RequestTarget) => Promise<boolean>;

export interface HttpServer {
  port: number;
  /** Stops accepting connections, waits up to graceMs for open requests, then closes the rest. */
  shutdown(graceMs: number): Promise<void>;
}

export interface HttpServerOptions {
  transcoder: Transcoder;
  /** Tried in order before the transcoder. */
  routes: HttpRoute[];
  host: string;
  port: number;
  logger: Logger;
  /** What /healthz reports. */
  isServing: () => boolean;
}

export async function startHttpServer({ transcoder, routes, host, port, logger, isServing }: HttpServerOptions): Promise<HttpServer> {
  // No bound on a whole request (a 2 GiB upload takes a while); headers must arrive within 60 s and a
  // connection that goes quiet for 120 s is dropped, which still stops slow-loris clients.
  const server = http.createServer({ keepAliveTimeout: 5_000, requestTimeout: 0, headersTimeout: 60_000 }, (req, res) => {
    const url = requestTarget(req.url);
    const requestId = requestIdOf(req.headers["x-request-id"]);
    route(req, res, url, requestId).catch((error: unknown) => {
      logger.error(
        { event: "http_internal_error", path: url.pathname, request_id: requestId, err: error },
        "unexpected HTTP error",
      );
      writeRpcError(
        res,
        new RpcError(Code.INTERNAL, `internal error (request id ${requestId})`, { reason: "INTERNAL" }),
        { "x-request-id": requestId },
      );
    });
  });

  async function route(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    url: RequestTarget,
    requestId: string,
  ): Promise<void> {
    if (url.pathname === "/healthz") {
      const serving = isServing();
      writeJson(res, serving ? 200 : 503, { status: serving ? "SERVING" : "NOT_SERVING" });
      return;
    }
    for (const handle of routes) if (await handle(req, res, url)) return;
    if (await transcoder.handle(req, res, url, requestId)) return;
    writeRpcError(
      res,
      new RpcError(Code.NOT_FOUND, `no route for ${req.method} ${url.pathname}`, { reason: "NO_ROUTE" }),
      { "x-request-id": requestId },
    );
  }

  server.setTimeout(120_000, (socket) => socket.destroy());

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

/**
 * The path exactly as sent (WHATWG URL parsing would fold `.`/`..` and `%2E%2E` segments, making a
 * namespace named ".." unreachable and letting `/a/../b` reach `/b`) and the query parameters.
 */
export function requestTarget(raw: string | undefined): RequestTarget {
  const target = raw ?? "/";
  const q = target.indexOf("?");
  const path = q >= 0 ? target.slice(0, q) : target;
  return {
    // An absolute-form target (`http://host/path`, sent to proxies) still routes by its path.
    pathname: path.startsWith("/") ? path : new URL(path, "http://localhost").pathname,
    searchParams: new URLSearchParams(q >= 0 ? target.slice(q + 1) : ""),
  };
}
