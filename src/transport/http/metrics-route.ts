import { isAdmin, parseBearer, type Authenticator } from "../../platform/auth.js";
import { permissionDenied, RpcError } from "../../platform/errors.js";
import type { Metrics } from "../../platform/metrics.js";
import { requestIdOf } from "../call.js";
import { writeRpcError } from "./responses.js";
import type { HttpRoute } from "./server.js";

/**
 * `GET /metrics` in the Prometheus text format. It names every method and the job queue's depth, so it
 * takes an admin key unless `isPublic` (a scraper on a private network that holds no key).
 */
export function metricsRoute(metrics: Metrics, authenticate: Authenticator, isPublic: boolean): HttpRoute {
  return async (req, res, target) => {
    if (target.pathname !== "/metrics" || req.method !== "GET") return false;
    if (!isPublic) {
      try {
        const token = parseBearer(req.headers.authorization);
        const principal = await authenticate(token === undefined ? undefined : { token, source: "bearer" });
        if (!isAdmin(principal)) throw permissionDenied(`this API key lacks the "admin" scope`, "MISSING_SCOPE");
      } catch (error) {
        if (!(error instanceof RpcError)) throw error;
        writeRpcError(res, error, { "x-request-id": requestIdOf(req.headers["x-request-id"]) });
        return true;
      }
    }
    const text = await metrics.render();
    res.writeHead(200, {
      "content-type": "text/plain; version=0.0.4; charset=utf-8",
      "content-length": Buffer.byteLength(text),
      "cache-control": "no-store",
    });
    res.end(text);
    return true;
  };
}
