import http from "node:http";
import type { AddressInfo } from "node:net";
import { Code, internalError, invalidArgument, RpcError } from "../../platform/errors.js";
import type { Logger } from "../../platform/logger.js";
import { writeJson, writeRpcError } from "./responses.js";
import { requestIdOf } from "../call.js";
import type { RequestTarget } from "./request.js";
import type { Transcoder } from "./transcoder.js";

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
    // The listener must never throw: a fault in one request is answered and logged, and the server
    // goes on serving (an exception out of here would end the process).
    const requestId = requestIdOf(req.headers["x-request-id"]);
    let path: string | undefined;
    const fail = (error: unknown) => {
      logger.error({ event: "http_internal_error", path, request_id: requestId, err: error }, "unexpected HTTP error");
      try {
        writeRpcError(res, internalError(requestId), { "x-request-id": requestId });
      } catch {
        res.destroy();
      }
    };
    try {
      const url = requestTarget(req.url);
      if (url === undefined) {
        writeRpcError(
          res,
          invalidArgument([{ field: "request_target", description: "is not a valid request target" }], "BAD_REQUEST_TARGET"),
          { "x-request-id": requestId, connection: "close" },
        );
        return;
      }
      path = url.pathname;
      route(req, res, url, requestId).catch(fail);
    } catch (error) {
      fail(error);
    }
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
    // A name in the path with a broken escape (`%zz`) matches no route; saying so beats "no route".
    const error = brokenEscape(url.pathname)
      ? invalidArgument([{ field: "path", description: "holds an invalid percent-encoding (% must be followed by two hex digits of UTF-8)" }])
      : new RpcError(Code.NOT_FOUND, `no route for ${req.method} ${url.pathname}`, { reason: "NO_ROUTE" });
    writeRpcError(res, error, { "x-request-id": requestId });
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
 * namespace named ".." unreachable and letting `/a/../b` reach `/b`) and the query parameters;
 * undefined when the target is neither origin-form (`/path`) nor a parsable absolute-form URL.
 */
export function requestTarget(raw: string | undefined): RequestTarget | undefined {
  const target = raw ?? "/";
  const q = target.indexOf("?");
  const path = q >= 0 ? target.slice(0, q) : target;
  let pathname = path;
  if (!path.startsWith("/")) {
    // An absolute-form target (`http://host/path`, sent to proxies) still routes by its path.
    if (!URL.canParse(path)) return undefined;
    pathname = new URL(path).pathname;
  }
  return { pathname, searchParams: new URLSearchParams(q >= 0 ? target.slice(q + 1) : "") };
}

function brokenEscape(path: string): boolean {
  try {
    decodeURIComponent(path);
    return false;
  } catch {
    return true;
  }
}
