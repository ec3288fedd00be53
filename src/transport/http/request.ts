import type { IncomingMessage } from "node:http";
import { parseBearer, type Credential } from "../../platform/auth.js";
import { Code, invalidArgument, RpcError } from "../../platform/errors.js";

/** The request target as routes see it: the path as sent (no dot-segment folding) and the query. */
export interface RequestTarget {
  pathname: string;
  searchParams: URLSearchParams;
}

/**
 * A body over its limit is still read (and dropped) up to this many bytes, so the client, which is
 * usually still sending, can read the 413 instead of seeing its connection reset; past it the
 * connection is closed.
 */
const MAX_DISCARDED_BODY_BYTES = 64 * 1024 * 1024;

/** The reason of the RpcError a body over its limit fails with (answered 413). */
export const BODY_TOO_LARGE = "BODY_TOO_LARGE";

/**
 * Reads the body, up to `limit` bytes. A larger one is read to its end and dropped (up to
 * MAX_DISCARDED_BODY_BYTES) before the error: stopping to read while the client still writes would
 * make the connection reset and the client lose the answer. Past that it fails at once, and the
 * caller must close the connection after its answer (`req.complete` is false).
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const tooLarge = () => invalidArgument([{ field: "body", description: `exceeds ${limit} bytes` }], BODY_TOO_LARGE);
    const declared = Number(req.headers["content-length"] ?? "0");
    if (declared > MAX_DISCARDED_BODY_BYTES) {
      reject(tooLarge());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let over = declared > limit;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) over = true;
      if (!over) {
        chunks.push(chunk);
        return;
      }
      chunks.length = 0;
      if (size > MAX_DISCARDED_BODY_BYTES) {
        req.off("data", onData);
        req.pause();
        reject(tooLarge());
      }
    };
    req.on("data", onData);
    req.on("end", () => (over ? reject(tooLarge()) : resolve(Buffer.concat(chunks))));
    req.on("error", reject);
    // After "end" this is a no-op; before it the client went away.
    req.on("close", () => {
      reject(new RpcError(Code.CANCELLED, "client disconnected", { reason: "CLIENT_DISCONNECTED" }));
    });
  });
}

/** The caller's API key: `Authorization: Bearer`, else the `auth_token` cookie. */
export function credentialOf(req: IncomingMessage): Credential | undefined {
  const token = parseBearer(req.headers.authorization);
  if (token) return { token, source: "bearer" };
  const cookie = parseCookies(req.headers.cookie).get("auth_token");
  return cookie ? { token: cookie, source: "cookie" } : undefined;
}

/**
 * A Cookie header's cookies. Of two with one name the first is kept, as browsers list the most
 * specific (longest path) first, and as the first Authorization header is the one read: a cookie
 * planted for a wider path or a parent domain does not take the place of the page's own.
 */
export function parseCookies(header: string | undefined): Map<string, string> {
  const cookies = new Map<string, string>();
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    if (cookies.has(name)) continue;
    let value = part.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    try {
      cookies.set(name, decodeURIComponent(value));
    } catch {
      cookies.set(name, value);
    }
  }
  return cookies;
}

/**
 * Whether a request that rides on a cookie may have come from another site, as far as the browser
 * says. `Sec-Fetch-Site`, when sent, decides: only `same-origin` and `none` (the user's own
 * navigation) pass, so a sibling subdomain (`same-site`) does not. Without it, `Origin` must name this
 * host; `Origin: null` (a sandboxed frame, a `data:` page, a redirect across sites) is opaque, so it
 * never does. No header at all is a client that is not a browser, or one too old to say: it passes.
 */
export function isSameOrigin(req: IncomingMessage): boolean {
  const site = req.headers["sec-fetch-site"];
  if (site !== undefined) return site === "same-origin" || site === "none";
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  if (origin === "null") return false;
  try {
    return new URL(origin).host === req.headers.host;
  } catch {
    return false;
  }
}
