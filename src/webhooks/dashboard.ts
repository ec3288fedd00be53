import { randomBytes } from "node:crypto";
import type { ServerResponse } from "node:http";
import { hasScope, type Authenticator } from "../platform/auth.js";
import { RpcError } from "../platform/errors.js";
import { BODY_TOO_LARGE, isSameOrigin, readBody } from "../transport/http/request.js";
import type { HttpRoute } from "../transport/http/server.js";
import { dashboardPage } from "./dashboard-page.js";
import { EVENT_CATALOG } from "./events.js";

const PAGE = "/dashboard/webhooks";
const MAX_FORM_BYTES = 4096;
/** How long the dashboard's session cookie lasts. */
const COOKIE_MAX_AGE_S = 12 * 60 * 60;

/**
 * `/dashboard/webhooks`: one page, served with everything inline (no CDN), that manages webhooks
 * through the JSON API with the `auth_token` cookie. The login form checks the API key (it must
 * have the `webhooks` scope) before setting the cookie: HttpOnly, SameSite=Strict.
 */
export function dashboardRoutes(authenticate: Authenticator): HttpRoute {
  return async (req, res, target) => {
    if (target.pathname === PAGE && (req.method === "GET" || req.method === "HEAD")) {
      sendPage(res, 200, "");
      return true;
    }
    // A login from another site would sign the victim in with the attacker's key (login CSRF); the
    // SameSite cookie does not cover it.
    if ((target.pathname === `${PAGE}/login` || target.pathname === `${PAGE}/logout`) && !isSameOrigin(req)) {
      sendPage(res, 403, "Log in from this page.");
      return true;
    }
    if (target.pathname === `${PAGE}/login` && req.method === "POST") {
      let form: URLSearchParams;
      try {
        form = new URLSearchParams((await readBody(req, MAX_FORM_BYTES)).toString("utf8"));
      } catch (error) {
        if (!(error instanceof RpcError) || error.reason !== BODY_TOO_LARGE) throw error;
        if (!req.complete) res.setHeader("connection", "close");
        sendPage(res, 413, "That form was too large.");
        return true;
      }
      const token = form.get("token")?.trim() ?? "";
      const problem = await checkToken(authenticate, token);
      if (problem) {
        sendPage(res, 401, problem);
      } else {
        res.writeHead(303, { location: PAGE, "set-cookie": cookie(token, COOKIE_MAX_AGE_S), "cache-control": "no-store" });
        res.end();
      }
      return true;
    }
    if (target.pathname === `${PAGE}/logout` && req.method === "POST") {
      res.writeHead(303, { location: PAGE, "set-cookie": cookie("", 0), "cache-control": "no-store" });
      res.end();
      return true;
    }
    return false;
  };
}

async function checkToken(authenticate: Authenticator, token: string): Promise<string> {
  if (token === "") return "Enter an API key.";
  try {
    const principal = await authenticate({ token, source: "bearer" });
    return hasScope(principal, "webhooks") ? "" : "This API key lacks the webhooks scope.";
  } catch (error) {
    if (error instanceof RpcError) return "This API key is not valid.";
    throw error;
  }
}

function cookie(value: string, maxAge: number): string {
  return `auth_token=${encodeURIComponent(value)}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}`;
}

function sendPage(res: ServerResponse, status: number, loginError: string): void {
  const nonce = randomBytes(16).toString("base64");
  const html = dashboardPage({ nonce, events: EVENT_CATALOG, loginError });
  res.writeHead(status, {
    "content-type": "text/html; charset=utf-8",
    "content-length": Buffer.byteLength(html),
    "cache-control": "no-store",
    "content-security-policy": `default-src 'self'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; frame-ancestors 'none'; form-action 'self'`,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
  });
  res.end(html);
}
