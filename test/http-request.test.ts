import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";

// The JSON API (transcoder) and the dashboard's forms share src/transport/http/request.ts: one body
// reader with a limit, one credential reader, one same-origin check. These are the cases where the two
// used to differ.

let t: TestApp;
let key: string;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
  key = (await createAccountWithKey(t, ["namespaces", "webhooks"])).key;
});
afterAll(async () => {
  await t?.stop();
});

function raw(method: string, path: string, headers: Record<string, string>, body = ""): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(t.httpUrl);
    const req = http.request({ hostname, port, path, method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** A cookie-authenticated JSON write through the transcoder. */
const apiWrite = (name: string, headers: Record<string, string>) =>
  raw("POST", "/v1/namespaces", { cookie: `auth_token=${key}`, "content-type": "application/json", ...headers }, JSON.stringify({ name }));

/** A login posted to the dashboard. */
const login = (headers: Record<string, string>, body = `token=${encodeURIComponent(key)}`) =>
  raw("POST", "/dashboard/webhooks/login", { "content-type": "application/x-www-form-urlencoded", ...headers }, body);

describe("the same-origin check, shared by the JSON API and the dashboard", () => {
  it.each([
    ["Origin: null (a sandboxed frame or data: page)", { origin: "null" }],
    ["Sec-Fetch-Site: cross-site without an Origin", { "sec-fetch-site": "cross-site" }],
    ["Sec-Fetch-Site: same-site (a sibling subdomain)", { "sec-fetch-site": "same-site" }],
    ["Sec-Fetch-Site: cross-site even when Origin names this host", { "sec-fetch-site": "cross-site", origin: "http://HOST" }],
    ["a foreign Origin", { origin: "https://evil.example" }],
  ])("refuses %s on both", async (_label, given) => {
    const headers = Object.fromEntries(Object.entries(given).map(([k, v]) => [k, v.replace("HOST", new URL(t.httpUrl).host)]));
    const write = await apiWrite(`csrf-${Math.random().toString(36).slice(2, 8)}`, headers);
    expect(write.status).toBe(403);
    expect(JSON.parse(write.body).details[0].reason).toBe("CSRF_ORIGIN");
    const form = await login(headers);
    expect(form.status).toBe(403);
    expect(form.headers["set-cookie"]).toBeUndefined();
  });

  it.each([
    ["Sec-Fetch-Site: same-origin", { "sec-fetch-site": "same-origin" }],
    ["Sec-Fetch-Site: none (the user's own navigation)", { "sec-fetch-site": "none" }],
    ["an Origin naming this host", { origin: "http://HOST" }],
    ["neither header (not a browser)", {}],
  ])("accepts %s on both", async (_label, given) => {
    const headers = Object.fromEntries(Object.entries(given).map(([k, v]) => [k, v.replace("HOST", new URL(t.httpUrl).host)]));
    const write = await apiWrite(`ok-${Math.random().toString(36).slice(2, 8)}`, headers);
    expect(write.status).toBe(200);
    const form = await login(headers);
    expect(form.status).toBe(303);
    expect(form.headers["set-cookie"]?.[0]).toContain("HttpOnly; SameSite=Strict");
  });
});

describe("bodies have a limit on both", () => {
  it("answers a dashboard form over 4 KiB with 413 and signs nobody in", async () => {
    const form = await login({}, `token=${encodeURIComponent(key)}&pad=${"x".repeat(5_000)}`);
    expect(form.status).toBe(413);
    expect(form.headers["set-cookie"]).toBeUndefined();
  });

  it("answers a JSON body over 1 MiB with 413", async () => {
    const write = await raw(
      "POST",
      "/v1/namespaces",
      { authorization: `Bearer ${key}`, "content-type": "application/json" },
      JSON.stringify({ name: "big", comment: "x".repeat(1024 * 1024) }),
    );
    expect(write.status).toBe(413);
    expect(JSON.parse(write.body).details.at(-1).reason).toBe("BODY_TOO_LARGE");
  });
});

describe("credentials", () => {
  it("prefer the Authorization header to the cookie, on the JSON API", async () => {
    const res = await raw("GET", "/v1/account", { authorization: `Bearer ${key}`, cookie: "auth_token=atr_not-a-key" });
    expect(res.status).toBe(200);
    const cookieOnly = await raw("GET", "/v1/account", { cookie: `other=1; auth_token="${encodeURIComponent(key)}"` });
    expect(cookieOnly.status).toBe(200);
  });

  it("take the first of two cookies of one name, the most specific a browser sends, as the first Authorization header", async () => {
    expect((await raw("GET", "/v1/account", { cookie: `auth_token=${key}; auth_token=atr_planted` })).status).toBe(200);
    expect((await raw("GET", "/v1/account", { cookie: `auth_token=atr_planted; auth_token=${key}` })).status).toBe(401);
  });
});
