import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  matchPathTemplate,
  parsePathTemplate,
  PathTemplateError,
} from "../src/transport/http/path-template.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type HttpResult, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";

const BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest";
const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";

/** Binds of `template` against `path` as a plain object, or undefined when it does not match. */
function bind(template: string, path: string): Record<string, string> | undefined {
  const bound = matchPathTemplate(parsePathTemplate(template), path);
  return bound && Object.fromEntries(bound);
}

describe("path templates", () => {
  it("parses literals, variables and a verb", () => {
    const t = parsePathTemplate("/v1/{name=shelves/*}/books/{book}:publish");
    expect(t.verb).toBe("publish");
    expect(t.segments).toEqual([
      { kind: "literal", value: "v1" },
      { kind: "literal", value: "shelves" },
      { kind: "wildcard" },
      { kind: "literal", value: "books" },
      { kind: "wildcard" },
    ]);
    expect(t.variables).toEqual([
      { fieldPath: "name", start: 1, end: 3 },
      { fieldPath: "book", start: 4, end: 5 },
    ]);
    expect(t.literalCount).toBe(3);
  });

  it("matches literal-only templates exactly", () => {
    expect(bind("/v1/namespaces", "/v1/namespaces")).toEqual({});
    expect(bind("/v1/namespaces", "/v1/namespace")).toBeUndefined();
    expect(bind("/v1/namespaces", "/v1/namespaces/x")).toBeUndefined();
    expect(bind("/v1/namespaces", "/v1")).toBeUndefined();
    expect(bind("/v1/namespaces", "v1/namespaces")).toBeUndefined();
    expect(bind("/v1/namespaces", "/v1/namespaces/")).toBeUndefined();
    // Literals compare percent-decoded.
    expect(bind("/v1/namespaces", "/v1/n%61mespaces")).toEqual({});
  });

  it("binds a single-segment variable, percent-decoded", () => {
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/payments")).toEqual({ name: "payments" });
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/a%2Fb")).toEqual({ name: "a/b" });
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/team%2Fa%3Ab")).toEqual({ name: "team/a:b" });
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/a:b")).toEqual({ name: "a:b" });
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/caf%C3%A9%20x")).toEqual({ name: "café x" });
    expect(bind("/v1/namespaces/{name}/token", "/v1/namespaces/x/token")).toEqual({ name: "x" });
  });

  it("does not match a missing, empty or extra segment, or a malformed escape", () => {
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces")).toBeUndefined();
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/")).toBeUndefined();
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/a/b")).toBeUndefined();
    expect(bind("/v1/namespaces/{name}/token", "/v1/namespaces/x/tokens")).toBeUndefined();
    expect(bind("/v1/namespaces/{name}", "/v1/namespaces/%E0%A4%A")).toBeUndefined();
  });

  it("binds dotted field paths", () => {
    expect(bind("/v1/namespaces/{namespace.name}", "/v1/namespaces/x")).toEqual({ "namespace.name": "x" });
    expect(bind("/v1/{a.b.c}/x", "/v1/deep/x")).toEqual({ "a.b.c": "deep" });
  });

  it("binds multi-segment patterns, keeping an encoded slash encoded", () => {
    expect(bind("/v1/{name=shelves/*}", "/v1/shelves/s1")).toEqual({ name: "shelves/s1" });
    expect(bind("/v1/{name=shelves/*}", "/v1/shelves/a%2Fb")).toEqual({ name: "shelves/a%2Fb" });
    expect(bind("/v1/{name=shelves/*}", "/v1/shelves/a%3Ab")).toEqual({ name: "shelves/a:b" });
    expect(bind("/v1/{name=shelves/*}", "/v1/racks/s1")).toBeUndefined();
    expect(bind("/v1/{name=shelves/*}", "/v1/shelves")).toBeUndefined();
    expect(bind("/v1/{name=shelves/*}/books/{book}", "/v1/shelves/s1/books/b2")).toEqual({
      name: "shelves/s1",
      book: "b2",
    });
  });

  it("binds `**` to the rest of the path", () => {
    expect(bind("/v1/files/{path=**}", "/v1/files/a")).toEqual({ path: "a" });
    expect(bind("/v1/files/{path=**}", "/v1/files/a/b/c")).toEqual({ path: "a/b/c" });
    expect(bind("/v1/files/{path=**}", "/v1/files/a%2Fb/c")).toEqual({ path: "a%2Fb/c" });
    expect(bind("/v1/{name=shelves/**}", "/v1/shelves/x/y")).toEqual({ name: "shelves/x/y" });
    expect(bind("/v1/{name=shelves/**}", "/v1/racks/x/y")).toBeUndefined();
    expect(bind("/static/**", "/static/css/site.css")).toEqual({});
  });

  it("matches a verb only when the path carries it", () => {
    expect(bind("/v1/namespaces:batchCreate", "/v1/namespaces:batchCreate")).toEqual({});
    expect(bind("/v1/namespaces:batchCreate", "/v1/namespaces:batchDelete")).toBeUndefined();
    expect(bind("/v1/namespaces:batchCreate", "/v1/namespaces")).toBeUndefined();
    expect(bind("/v1/namespaces", "/v1/namespaces:batchCreate")).toBeUndefined();
    expect(bind("/v1/things/{id}:cancel", "/v1/things/a:b:cancel")).toEqual({ id: "a:b" });
    expect(bind("/v1/things/{id}:cancel", "/v1/things/a")).toBeUndefined();
    // A colon inside a variable is not a verb.
    expect(parsePathTemplate("/v1/namespaces/{name}").verb).toBeUndefined();
  });

  it.each([
    ["no leading slash", "v1/namespaces"],
    ["an empty segment", "/v1//namespaces"],
    ["a trailing slash", "/v1/namespaces/"],
    ["an unclosed variable", "/v1/{name"],
    ["`**` before the end", "/v1/**/x"],
    ["a partial wildcard", "/v1/a*"],
    ["a stray brace", "/v1/a}b"],
    ["an empty variable", "/v1/{}"],
    ["an empty field path", "/v1/{=shelves/*}"],
    ["a bad field path", "/v1/{a..b}"],
    ["a nested variable", "/v1/{a={b}}"],
    ["an empty verb", "/v1/x:"],
    ["a verb with a slash", "/v1/x:do/more"],
  ])("rejects a template with %s", (_label, template) => {
    expect(() => parsePathTemplate(template)).toThrow(PathTemplateError);
  });
});

describe("transcoding over HTTP", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp(await createTestDatabase());
  });
  afterAll(async () => {
    await t?.stop();
  });

  /** Sends a raw request with node:http (full control over headers such as Origin and Host). */
  function raw(
    method: string,
    path: string,
    headers: Record<string, string>,
    body?: string | Buffer,
  ): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: HttpResult["body"] }> {
    return new Promise((resolve, reject) => {
      const { hostname, port } = new URL(t.httpUrl);
      // Options, not a URL string, so that the path goes out exactly as given.
      const req = http.request({ hostname, port, path, method, headers, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          resolve({ status: res.statusCode!, headers: res.headers, body: text ? JSON.parse(text) : undefined });
        });
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(body);
    });
  }

  describe("request JSON", () => {
    it("accepts proto names and JSON (lowerCamel) names, ignoring unknown fields", async () => {
      const snake = await t.http("POST", "/v1/namespaces", {
        token: ADMIN_TOKEN,
        body: { name: "tc-snake", service_export_to: ["a"], sync_to_global_registry: true, bogus: 1, nested: { x: 1 } },
      });
      expect(snake.status).toBe(200);
      expect(snake.body).toMatchObject({ name: "tc-snake", service_export_to: ["a"], sync_to_global_registry: true });

      const camel = await t.http("POST", "/v1/namespaces", {
        token: ADMIN_TOKEN,
        body: { name: "tc-camel", serviceExportTo: ["b", "*"], syncToGlobalRegistry: true, unknownThing: "x" },
      });
      expect(camel.status).toBe(200);
      expect(camel.body).toMatchObject({ name: "tc-camel", service_export_to: ["b", "*"], sync_to_global_registry: true });
      expect(camel.body).not.toHaveProperty("serviceExportTo");
      expect(camel.body).not.toHaveProperty("unknownThing");
    });

    it("takes a field given under both its names once when they agree, and names it when they differ", async () => {
      const same = await t.http("POST", "/v1/namespaces", {
        token: ADMIN_TOKEN,
        body: { name: "tc-twice", syncToGlobalRegistry: true, sync_to_global_registry: true },
      });
      expect(same.status, JSON.stringify(same.body)).toBe(200);
      const differing = await t.http("POST", "/v1/namespaces", {
        token: ADMIN_TOKEN,
        body: { name: "tc-twice-2", sync_to_global_registry: false, syncToGlobalRegistry: true },
      });
      expect(differing.status).toBe(400);
      expect(differing.body.details[0].field_violations).toEqual([
        { field: "namespace.sync_to_global_registry", description: "is given twice, as sync_to_global_registry and syncToGlobalRegistry, with different values" },
      ]);
    });

    it("accepts both name forms on the admin routes too", async () => {
      const account = await t.http("POST", "/v1/admin/accounts", {
        token: ADMIN_TOKEN,
        body: { name: "camel-account", groupIds: ["g1"], extra: true },
      });
      expect(account.status).toBe(200);
      expect(account.body.group_ids).toEqual(["g1"]);
      const expire = new Date(Date.now() + 3_600_000).toISOString();
      const key = await t.http("POST", `/v1/admin/accounts/${account.body.id}/keys`, {
        token: ADMIN_TOKEN,
        body: { name: "k", scopes: ["namespaces"], expireTime: expire },
      });
      expect(key.status).toBe(200);
      expect(Date.parse(key.body.api_key.expire_time)).toBe(Date.parse(expire));
      const key2 = await t.http("POST", `/v1/admin/accounts/${account.body.id}/keys`, {
        token: ADMIN_TOKEN,
        body: { name: "k2", scopes: ["namespaces"], expire_time: expire },
      });
      expect(key2.status).toBe(200);
      expect(Date.parse(key2.body.api_key.expire_time)).toBe(Date.parse(expire));
    });

    it("output uses proto names and includes default-valued scalars", async () => {
      const created = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: { name: "tc-defaults" } });
      expect(created.status).toBe(200);
      expect(created.body).toMatchObject({
        name: "tc-defaults",
        sync_to_global_registry: false,
        service_export_to: [],
        metadata: {},
        total_service_count: 0,
        total_instance_count: 0,
        total_health_instance_count: 0,
        editable: true,
        deleteable: true,
      });
      expect(Object.keys(created.body).every((k) => k === k.toLowerCase())).toBe(true);

      const empty = await t.http("GET", "/v1/namespaces?name=tc-none-such", { token: ADMIN_TOKEN });
      expect(empty).toMatchObject({ status: 200, body: { amount: 0, namespaces: [] } });
    });

    it("binds query parameters: repeated fields, offset and limit", async () => {
      for (const name of ["tcq-1", "tcq-2", "tcq-3"]) {
        expect((await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: { name } })).status).toBe(200);
      }
      const two = await t.http("GET", "/v1/namespaces?name=tcq-1&name=tcq-3", { token: ADMIN_TOKEN });
      expect(two.status).toBe(200);
      expect(two.body.amount).toBe(2);
      expect(two.body.namespaces.map((n: { name: string }) => n.name).sort()).toEqual(["tcq-1", "tcq-3"]);

      const page = await t.http("GET", "/v1/namespaces?name=tcq-*&offset=1&limit=1", { token: ADMIN_TOKEN });
      expect(page.status).toBe(200);
      expect(page.body.amount).toBe(3);
      expect(page.body.namespaces).toHaveLength(1);

      // Unknown query parameters are ignored like unknown JSON fields.
      const ignored = await t.http("GET", "/v1/namespaces?name=tcq-2&whatever=1&name.sub=2", { token: ADMIN_TOKEN });
      expect(ignored.status).toBe(200);
      expect(ignored.body.amount).toBe(1);
    });

    it("answers a query parameter of the wrong type with 400 naming it", async () => {
      const res = await t.http("GET", "/v1/namespaces?limit=many", { token: ADMIN_TOKEN });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe(3);
      const badRequest = res.body.details.find((d: { "@type": string }) => d["@type"] === BAD_REQUEST);
      expect(badRequest.field_violations).toEqual([{ field: "limit", description: expect.stringContaining("an integer") }]);
    });

    it("answers a JSON type error with 400 and a BadRequest naming the field", async () => {
      const res = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: { name: "x", comment: 5 } });
      expect(res.status).toBe(400);
      expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
      expect(res.body).toEqual({
        code: 3,
        message: expect.stringContaining("namespace.comment"),
        details: [
          {
            "@type": BAD_REQUEST,
            field_violations: [{ field: "namespace.comment", description: expect.stringContaining("must be a string") }],
          },
          { "@type": ERROR_INFO, reason: "INVALID_JSON", domain: "atrium" },
        ],
      });
    });

    it("names nested fields, list items and map values in JSON type errors", async () => {
      const violation = async (path: string, body: unknown) => {
        const res = await t.http("POST", path, { token: ADMIN_TOKEN, body });
        expect(res.status, JSON.stringify(res.body)).toBe(400);
        expect(res.body.details[0]["@type"]).toBe(BAD_REQUEST);
        expect(res.body.details[0].field_violations).toHaveLength(1);
        return res.body.details[0].field_violations[0];
      };
      expect(await violation("/v1/namespaces", { name: "x", service_export_to: "not-a-list" })).toEqual({
        field: "namespace.service_export_to",
        description: expect.stringMatching(/^must be a list \(/),
      });
      expect(await violation("/v1/namespaces", { name: "x", service_export_to: ["a", 5] })).toEqual({
        field: "namespace.service_export_to[1]",
        description: expect.stringMatching(/^must be a string \(/),
      });
      expect(await violation("/v1/namespaces", { name: "x", metadata: { k: "v", bad: 5 } })).toEqual({
        field: 'namespace.metadata["bad"]',
        description: expect.stringMatching(/^must be a string \(/),
      });
      expect(await violation("/v1/namespaces", { name: "x", metadata: [] })).toEqual({
        field: "namespace.metadata",
        description: expect.stringMatching(/^must be an object \(/),
      });
      expect(await violation("/v1/namespaces", { name: "x", editable: "yes" })).toEqual({
        field: "namespace.editable",
        description: expect.stringMatching(/^must be a boolean \(/),
      });
      expect(
        await violation("/v1/namespaces:batchCreate", {
          namespaces: [{ name: "ok" }, { name: "x", sync_to_global_registry: "yes" }],
        }),
      ).toEqual({ field: "namespaces[1].sync_to_global_registry", description: expect.stringMatching(/^must be a boolean \(/) });
      expect(await violation("/v1/namespaces:batchCreate", { namespaces: [{ name: "ok" }, "x"] })).toEqual({
        field: "namespaces[1]",
        description: expect.stringMatching(/^must be an object \(/),
      });
      expect(await violation("/v1/namespaces", [1, 2])).toEqual({
        field: "namespace",
        description: expect.stringMatching(/^must be an object \(/),
      });
      expect(await violation("/v1/namespaces:batchDelete", [])).toEqual({ field: "body", description: "must be a JSON object" });
      expect(await violation("/v1/namespaces:batchDelete", '"names"')).toEqual({ field: "body", description: "must be a JSON object" });
      // Nothing was created by any of these.
      const listed = await t.http("GET", "/v1/namespaces?name=ok&name=x", { token: ADMIN_TOKEN });
      expect(listed.body).toEqual({ amount: 0, namespaces: [] });
    });

    it("answers invalid JSON with 400 naming `body`", async () => {
      const res = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: '{"name": "x",' });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe(3);
      expect(res.body.message).toMatch(/^body: is not valid JSON/);
      expect(res.body.details[0]).toEqual({
        "@type": BAD_REQUEST,
        field_violations: [{ field: "body", description: expect.stringMatching(/^is not valid JSON/) }],
      });
      expect(res.body.details[1]).toMatchObject({ "@type": ERROR_INFO, reason: "INVALID_JSON" });
    });

    it("answers a body that is not UTF-8 with 400 naming `body`, rather than reading U+FFFD into it", async () => {
      const res = await raw(
        "POST",
        "/v1/admin/accounts",
        { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
        Buffer.concat([Buffer.from('{"name":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('b"}')]),
      );
      expect(res.status).toBe(400);
      expect(res.body.details[0].field_violations).toEqual([{ field: "body", description: "is not valid UTF-8" }]);
    });

    it("refuses a body over 1 MiB with 413", async () => {
      const big = JSON.stringify({ name: "big", comment: "x".repeat(1024 * 1024) });
      const res = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: big });
      expect(res.status).toBe(413);
      expect(res.body).toMatchObject({
        code: 3,
        message: "body: exceeds 1048576 bytes",
        details: [
          { "@type": BAD_REQUEST, field_violations: [{ field: "body", description: "exceeds 1048576 bytes" }] },
          { "@type": ERROR_INFO, reason: "BODY_TOO_LARGE" },
        ],
      });
      // The same, streamed without a Content-Length.
      const chunked = await raw(
        "POST",
        "/v1/namespaces",
        { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json", "transfer-encoding": "chunked" },
        big,
      );
      expect(chunked.status).toBe(413);
      expect(chunked.body.details.at(-1).reason).toBe("BODY_TOO_LARGE");
      // A body well over the limit, still being sent when the server has seen enough: the client
      // must get the 413, not a reset connection.
      const huge = JSON.stringify({ name: "huge", comment: "x".repeat(8 * 1024 * 1024) });
      for (let i = 0; i < 2; i++) {
        const res8 = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: huge });
        expect(res8.status).toBe(413);
        expect(res8.body.details.at(-1).reason).toBe("BODY_TOO_LARGE");
      }
      // Deterministically: the limit is passed while the client is still sending.
      const slow = await new Promise<{ status: number; body: HttpResult["body"] }>((resolve, reject) => {
        const { hostname, port } = new URL(t.httpUrl);
        const req = http.request(
          {
            hostname,
            port,
            path: "/v1/namespaces",
            method: "POST",
            agent: false,
            headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString()) }));
          },
        );
        req.on("error", reject);
        req.write(`{"name":"slow","comment":"${"x".repeat(1536 * 1024)}`);
        setTimeout(() => req.end(`${"y".repeat(512 * 1024)}"}`), 150);
      });
      expect(slow.status).toBe(413);
      expect(slow.body.details.at(-1).reason).toBe("BODY_TOO_LARGE");
      // The connection stays usable: the rest of the body was read, not left on the wire.
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      try {
        const send = (method: string, path: string, body?: string) =>
          new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
            const { hostname, port } = new URL(t.httpUrl);
            const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
            const req = http.request({ hostname, port, path, method, agent, headers }, (res) => {
              res.resume();
              res.on("end", () => resolve({ status: res.statusCode!, reused: req.reusedSocket }));
            });
            req.on("error", reject);
            req.end(body);
          });
        expect(await send("POST", "/v1/namespaces", big)).toEqual({ status: 413, reused: false });
        expect(await send("GET", "/v1/namespaces?limit=1")).toEqual({ status: 200, reused: true });
        expect(await send("POST", "/v1/namespaces", huge)).toEqual({ status: 413, reused: true });
        expect(await send("GET", "/v1/namespaces?limit=1")).toEqual({ status: 200, reused: true });
      } finally {
        agent.destroy();
      }
      // A body just under the limit is read (and then judged on its content).
      const fits = JSON.stringify({ name: "fits", comment: "x".repeat(1024 * 1024 - 100) });
      const ok = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: fits });
      expect(ok.status).toBe(400);
      expect(ok.body.details[0].field_violations[0].field).toBe("namespace.comment");
      // The server still answers afterwards.
      expect((await t.http("GET", "/healthz")).status).toBe(200);
    });
  });

  describe("routing", () => {
    it("answers an unknown path with 404 JSON", async () => {
      const res = await t.http("GET", "/v2/nothing", { token: ADMIN_TOKEN });
      expect(res.status).toBe(404);
      expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
      expect(res.body).toEqual({
        code: 5,
        message: "no route for GET /v2/nothing",
        details: [{ "@type": ERROR_INFO, reason: "NO_ROUTE", domain: "atrium" }],
      });
    });

    it("answers a path with a broken percent-escape with 400 naming the path", async () => {
      for (const path of ["/v1/namespaces/%zz", "/v1/namespaces/%C0%AF"]) {
        const res = await raw("GET", path, { authorization: `Bearer ${ADMIN_TOKEN}` });
        expect(res.status).toBe(400);
        expect(res.body.details[0].field_violations[0].field).toBe("path");
      }
    });

    it("answers a known path with the wrong verb with 405", async () => {
      const res = await t.http("PUT", "/v1/namespaces", { token: ADMIN_TOKEN, body: {} });
      expect(res.status).toBe(405);
      expect(res.body).toMatchObject({
        code: 12,
        message: "method PUT is not allowed on /v1/namespaces",
        details: [{ "@type": ERROR_INFO, reason: "METHOD_NOT_ALLOWED" }],
      });
      expect((await t.http("GET", "/v1/namespaces:batchCreate", { token: ADMIN_TOKEN })).status).toBe(405);
      expect((await t.http("DELETE", "/v1/admin/keys", { token: ADMIN_TOKEN })).status).toBe(405);
    });

    it("routes by the path as sent, without folding dot segments", async () => {
      const res = await raw("GET", "/v1/admin/../namespaces", { authorization: `Bearer ${ADMIN_TOKEN}` });
      expect(res.status).toBe(404);
      expect(res.body.details[0].reason).toBe("NO_ROUTE");
      const withQuery = await raw("GET", "/v1/namespaces?limit=1", { authorization: `Bearer ${ADMIN_TOKEN}` });
      expect(withQuery.status).toBe(200);
      expect(withQuery.body.namespaces).toHaveLength(1);
    });

    it("serves /healthz", async () => {
      const res = await t.http("GET", "/healthz");
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ status: "SERVING" });
    });
  });

  describe("status mapping", () => {
    it("maps gRPC codes as grpc-gateway does", async () => {
      const noKey = await t.http("GET", "/v1/namespaces");
      expect(noKey.status).toBe(401);
      expect(noKey.body).toMatchObject({ code: 16, details: [{ "@type": ERROR_INFO, reason: "MISSING_CREDENTIALS" }] });

      const badKey = await t.http("GET", "/v1/namespaces", { token: "atr_not-a-key" });
      expect(badKey.status).toBe(401);
      expect(badKey.body).toMatchObject({ code: 16, details: [{ reason: "INVALID_API_KEY" }] });

      const webhooksOnly = await createAccountWithKey(t, ["webhooks"]);
      const denied = await t.http("GET", "/v1/namespaces", { token: webhooksOnly.key });
      expect(denied.status).toBe(403);
      expect(denied.body).toMatchObject({ code: 7, details: [{ reason: "MISSING_SCOPE" }] });

      const missing = await t.http("GET", "/v1/namespaces/tc-missing", { token: ADMIN_TOKEN });
      expect(missing.status).toBe(404);
      expect(missing.body).toMatchObject({ code: 5, message: 'namespace "tc-missing" not found' });

      expect((await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: { name: "tc-dup" } })).status).toBe(200);
      const dup = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: { name: "tc-dup" } });
      expect(dup.status).toBe(409);
      expect(dup.body).toMatchObject({ code: 6, details: [{ reason: "NAMESPACE_EXISTS" }] });

      const invalid = await t.http("POST", "/v1/namespaces", { token: ADMIN_TOKEN, body: { name: "bad name" } });
      expect(invalid.status).toBe(400);
      expect(invalid.body.code).toBe(3);
    });
  });

  describe("request ids", () => {
    it("sets x-request-id on every response and echoes a well-formed incoming one", async () => {
      const fresh = await t.http("GET", "/v1/namespaces?limit=1", { token: ADMIN_TOKEN });
      expect(fresh.status).toBe(200);
      expect(fresh.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);

      const echoed = await t.http("GET", "/v1/namespaces?limit=1", {
        token: ADMIN_TOKEN,
        headers: { "x-request-id": "trace-123.abc:4_5" },
      });
      expect(echoed.headers.get("x-request-id")).toBe("trace-123.abc:4_5");

      const malformed = await t.http("GET", "/v1/namespaces?limit=1", {
        token: ADMIN_TOKEN,
        headers: { "x-request-id": "bad id with spaces" },
      });
      expect(malformed.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);

      // Errors carry it too, whether from the handler, auth or decoding.
      for (const [method, path, body] of [
        ["GET", "/v1/namespaces/tc-nowhere", undefined],
        ["POST", "/v1/namespaces", "{oops"],
      ] as const) {
        const failed = await t.http(method, path, { token: ADMIN_TOKEN, body, headers: { "x-request-id": "err-1" } });
        expect(failed.status).toBe(method === "GET" ? 404 : 400);
        expect(failed.headers.get("x-request-id")).toBe("err-1");
      }
      const noRoute = await t.http("GET", "/nowhere", { headers: { "x-request-id": "err-3" } });
      expect(noRoute.status).toBe(404);
      expect(noRoute.headers.get("x-request-id")).toBe("err-3");
      const wrongVerb = await t.http("PATCH", "/v1/namespaces", { headers: { "x-request-id": "err-4" } });
      expect(wrongVerb.status).toBe(405);
      expect(wrongVerb.headers.get("x-request-id")).toBe("err-4");
      const unauthenticated = await t.http("GET", "/v1/namespaces", { headers: { "x-request-id": "err-2" } });
      expect(unauthenticated.status).toBe(401);
      expect(unauthenticated.headers.get("x-request-id")).toBe("err-2");
    });

    it("logs the HTTP call with the same request id", async () => {
      await t.http("GET", "/v1/namespaces/tc-logged", { token: ADMIN_TOKEN, headers: { "x-request-id": "log-req-7" } });
      const line = t.logs.find((l) => l.event === "rpc" && l.request_id === "log-req-7");
      expect(line).toMatchObject({ transport: "http", method: "/v1.NamespaceService/GetNamespace", code: "NOT_FOUND" });
    });
  });

  describe("cookie authentication", () => {
    const cookie = `auth_token=${ADMIN_TOKEN}`;

    it("authenticates reads with the auth_token cookie", async () => {
      const res = await t.http("GET", "/v1/namespaces?limit=1", { headers: { cookie: `theme=dark; ${cookie}` } });
      expect(res.status).toBe(200);
      const bad = await t.http("GET", "/v1/namespaces?limit=1", { headers: { cookie: "auth_token=atr_nope" } });
      expect(bad.status).toBe(401);
    });

    it("accepts a cookie-authenticated JSON write from the same origin", async () => {
      const res = await raw(
        "POST",
        "/v1/namespaces",
        { cookie, "content-type": "application/json; charset=utf-8", origin: t.httpUrl },
        JSON.stringify({ name: "tc-cookie-ok" }),
      );
      expect(res.status).toBe(200);
      expect(res.body.name).toBe("tc-cookie-ok");
    });

    it("refuses a cookie-authenticated write without a JSON content type", async () => {
      for (const type of [undefined, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]) {
        const headers: Record<string, string> = { cookie };
        if (type) headers["content-type"] = type;
        const res = await raw("POST", "/v1/namespaces", headers, JSON.stringify({ name: "tc-csrf" }));
        expect(res.status, String(type)).toBe(403);
        expect(res.body).toMatchObject({ code: 7, details: [{ "@type": ERROR_INFO, reason: "CSRF_CONTENT_TYPE" }] });
      }
      expect((await t.http("GET", "/v1/namespaces/tc-csrf", { token: ADMIN_TOKEN })).status).toBe(404);
      // DELETE (like PUT and PATCH) cannot come from a form or a cross-site simple request.
      expect((await raw("DELETE", "/v1/namespaces/tc-cookie-ok", { cookie })).status).toBe(200);
    });

    it("refuses a cookie-authenticated write from a foreign origin", async () => {
      const res = await raw(
        "POST",
        "/v1/namespaces",
        { cookie, "content-type": "application/json", origin: "https://evil.example" },
        JSON.stringify({ name: "tc-csrf-origin" }),
      );
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({ code: 7, details: [{ reason: "CSRF_ORIGIN" }] });
      expect((await t.http("GET", "/v1/namespaces/tc-csrf-origin", { token: ADMIN_TOKEN })).status).toBe(404);
    });

    it("does not apply the CSRF checks to bearer-authenticated writes", async () => {
      const res = await raw(
        "POST",
        "/v1/namespaces",
        { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "text/plain", origin: "https://elsewhere.example" },
        JSON.stringify({ name: "tc-bearer-plain" }),
      );
      expect(res.status).toBe(200);
      expect(res.body.name).toBe("tc-bearer-plain");
      const del = await raw("DELETE", "/v1/namespaces/tc-bearer-plain", { authorization: `Bearer ${ADMIN_TOKEN}` });
      expect(del).toMatchObject({ status: 200, body: {} });
    });
  });
});
