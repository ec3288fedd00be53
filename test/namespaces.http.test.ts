import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type HttpOptions, type HttpResult, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";

let t: TestApp;
let adminAccountId: string;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
  const keys = await t.admin.admin.listApiKeys({ accountId: "" });
  adminAccountId = keys.apiKeys.find((k) => k.scopes.includes("admin"))!.accountId;
});
afterAll(async () => {
  await t?.stop();
});

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;
const TOKEN = /^[0-9a-f]{32}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest";
const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";

/** An HTTP call with the admin key unless options say otherwise. */
const call = (method: string, path: string, options: HttpOptions = {}) =>
  t.http(method, path, { token: ADMIN_TOKEN, ...options });

/** A request with node:http, which sends the path exactly as given (fetch folds `%2E%2E`). */
function raw(method: string, path: string, token = ADMIN_TOKEN): Promise<Pick<HttpResult, "status" | "body">> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(t.httpUrl);
    // Options, not a URL string: a URL string would be normalized too.
    const options = { hostname, port, path, method, headers: { authorization: `Bearer ${token}` } };
    const req = http.request(options, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString("utf8")) }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Expects a google.rpc.Status error body; returns its ErrorInfo reason and BadRequest field names. */
function expectError(res: HttpResult, status: number, code: number): { reason: string; fields: string[] } {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
  expect(res.body).toEqual({ code, message: expect.any(String), details: expect.any(Array) });
  const info = res.body.details.find((d: { "@type": string }) => d["@type"] === ERROR_INFO);
  expect(info).toMatchObject({ domain: "atrium", reason: expect.any(String) });
  const badRequest = res.body.details.find((d: { "@type": string }) => d["@type"] === BAD_REQUEST);
  return {
    reason: info.reason,
    fields: (badRequest?.field_violations ?? []).map((v: { field: string }) => v.field),
  };
}

const created = (name: string, extra: Record<string, unknown> = {}) =>
  call("POST", "/v1/namespaces", { body: { name, ...extra } }).then((res) => {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  });

describe("POST /v1/namespaces", () => {
  it("creates from the Namespace itself and returns it with its token, every field in proto names", async () => {
    const res = await call("POST", "/v1/namespaces", {
      body: {
        name: "h-payments",
        comment: "the payments team",
        owners: "alice,bert",
        service_export_to: ["billing", "*"],
        metadata: { team: "core", tier: "1" },
        sync_to_global_registry: true,
      },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toMatch(UUID);
    expect(res.body).toEqual({
      name: "h-payments",
      comment: "the payments team",
      owners: "alice,bert",
      token: expect.stringMatching(TOKEN),
      ctime: expect.stringMatching(RFC3339),
      mtime: expect.stringMatching(RFC3339),
      total_service_count: 0,
      total_health_instance_count: 0,
      total_instance_count: 0,
      user_ids: [],
      group_ids: [],
      id: expect.stringMatching(UUID),
      remove_user_ids: [],
      remove_group_ids: [],
      editable: true,
      service_export_to: ["billing", "*"],
      metadata: { team: "core", tier: "1" },
      sync_to_global_registry: true,
      deleteable: true,
    });
    expect(res.body.mtime).toBe(res.body.ctime);
  });

  it("defaults owners to the caller and leaves unset wrappers out", async () => {
    const body = await created("h-minimal");
    expect(body.owners).toBe(adminAccountId);
    expect(body).not.toHaveProperty("comment");
    expect(body.sync_to_global_registry).toBe(false);
  });

  it("answers a duplicate name with 409 NAMESPACE_EXISTS", async () => {
    await created("h-dup");
    const res = await call("POST", "/v1/namespaces", { body: { name: "h-dup" } });
    expect(expectError(res, 409, 6).reason).toBe("NAMESPACE_EXISTS");
    expect(res.body.message).toBe('namespace "h-dup" already exists');
  });

  it("answers bad fields with 400 naming them", async () => {
    const bad = expectError(await call("POST", "/v1/namespaces", { body: { name: "has space" } }), 400, 3);
    expect(bad).toEqual({ reason: "INVALID_ARGUMENT", fields: ["namespace.name"] });

    const both = expectError(
      await call("POST", "/v1/namespaces", { body: { name: "x".repeat(65), comment: "c".repeat(1025) } }),
      400,
      3,
    );
    expect(both.fields.sort()).toEqual(["namespace.comment", "namespace.name"]);

    const missing = expectError(await call("POST", "/v1/namespaces", { body: {} }), 400, 3);
    expect(missing.fields).toEqual(["namespace.name"]);
    const noBody = expectError(await call("POST", "/v1/namespaces"), 400, 3);
    expect(noBody.fields).toEqual(["namespace"]);
  });

  it("needs a key (401) with the namespaces scope (403)", async () => {
    const anonymous = await t.http("POST", "/v1/namespaces", { body: { name: "h-anon" } });
    expect(expectError(anonymous, 401, 16).reason).toBe("MISSING_CREDENTIALS");
    const webhooksOnly = await createAccountWithKey(t, ["webhooks"]);
    const denied = await t.http("POST", "/v1/namespaces", { token: webhooksOnly.key, body: { name: "h-denied" } });
    expect(expectError(denied, 403, 7).reason).toBe("MISSING_SCOPE");
    expect(denied.body.message).toBe('this API key lacks the "namespaces" scope');
    expect((await call("GET", "/v1/namespaces/h-denied")).status).toBe(404);

    const user = await createAccountWithKey(t, ["namespaces"]);
    const mine = await t.http("POST", "/v1/namespaces", { token: user.key, body: { name: "h-user-owned" } });
    expect(mine.status).toBe(200);
    expect(mine.body.owners).toBe(user.accountId);
  });
});

describe("GET /v1/namespaces/{name}", () => {
  it("returns the namespace without its token", async () => {
    const made = await created("h-get", { comment: "c", metadata: { k: "v" } });
    const res = await call("GET", "/v1/namespaces/h-get");
    expect(res.status).toBe(200);
    const { token, ...rest } = made;
    expect(token).toMatch(TOKEN);
    expect(res.body).toEqual(rest);
  });

  it("takes a name with / and : percent-encoded in one segment", async () => {
    const made = await created("team/a:b");
    const res = await call("GET", "/v1/namespaces/team%2Fa%3Ab");
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: "team/a:b", id: made.id });
    // ':' need not be encoded inside a segment.
    expect((await call("GET", "/v1/namespaces/team%2Fa:b")).body.id).toBe(made.id);
    // An unencoded '/' makes another path.
    expect(expectError(await call("GET", "/v1/namespaces/team/a:b"), 404, 5).reason).toBe("NO_ROUTE");
  });

  it("reserves the names . and .., and routes paths exactly as sent", async () => {
    for (const name of [".", ".."]) {
      const res = await call("POST", "/v1/namespaces", { body: { name } });
      expect(expectError(res, 400, 3).fields).toEqual(["namespace.name"]);
      expect(res.body.message).toBe(`namespace.name: "${name}" is reserved`);
    }
    const dotdot = await raw("GET", "/v1/namespaces/%2E%2E");
    expect(dotdot.status).toBe(400);
    expect(dotdot.body.details[0].field_violations[0].field).toBe("name");
    // Dot segments are not folded: this is no route, not /v1/namespaces.
    expect((await raw("GET", "/v1/admin/../namespaces")).status).toBe(404);
  });

  it("answers 404 for a missing name and 400 naming `name` for a malformed one", async () => {
    const missing = await call("GET", "/v1/namespaces/h-nowhere");
    expect(expectError(missing, 404, 5).reason).toBe("NAMESPACE_NOT_FOUND");
    expect(missing.body.message).toBe('namespace "h-nowhere" not found');
    const bad = expectError(await call("GET", "/v1/namespaces/no%20pe"), 400, 3);
    expect(bad.fields).toEqual(["name"]);
  });

  it("needs a key", async () => {
    expect(expectError(await t.http("GET", "/v1/namespaces/h-get"), 401, 16).reason).toBe("MISSING_CREDENTIALS");
  });
});

describe("GET /v1/namespaces", () => {
  beforeAll(async () => {
    for (const [name, owners] of [
      ["hl-alpha", "ann"],
      ["hl-beta", "ann,bob"],
      ["hl-gamma", "carl"],
      ["hlx-alpha", "dora"],
    ]) {
      await created(name!, { owners });
    }
  });

  const names = (res: HttpResult) => (res.body.namespaces as { name: string }[]).map((n) => n.name).sort();

  it("filters by name (repeated, with wildcards) and owner", async () => {
    const prefix = await call("GET", "/v1/namespaces?name=hl-*");
    expect(prefix.status).toBe(200);
    expect(prefix.body.amount).toBe(3);
    expect(names(prefix)).toEqual(["hl-alpha", "hl-beta", "hl-gamma"]);

    expect(names(await call("GET", "/v1/namespaces?name=hl-beta&name=*x-alpha"))).toEqual(["hl-beta", "hlx-alpha"]);
    expect(names(await call("GET", "/v1/namespaces?name=*-alpha"))).toEqual(["hl-alpha", "hlx-alpha"]);
    expect(names(await call("GET", "/v1/namespaces?owner=ann"))).toEqual(["hl-alpha", "hl-beta"]);
    expect(names(await call("GET", "/v1/namespaces?name=hl*&owner=bo*"))).toEqual(["hl-beta"]);
    expect(names(await call("GET", "/v1/namespaces?name=hl-%2A&owner=carl"))).toEqual(["hl-gamma"]);
    // An account id is one id whatever its case, in the owners list and in the filter.
    const id = "0c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f";
    await created("idowned-ns", { owners: id.toUpperCase() });
    expect(names(await call("GET", `/v1/namespaces?owner=${id}`))).toEqual(["idowned-ns"]);
    expect(names(await call("GET", `/v1/namespaces?owner=${id.toUpperCase()}`))).toEqual(["idowned-ns"]);
  });

  it("pages with offset and limit, counting every match", async () => {
    const page1 = await call("GET", "/v1/namespaces?name=hl-*&offset=0&limit=2");
    const page2 = await call("GET", "/v1/namespaces?name=hl-*&offset=2&limit=2");
    const past = await call("GET", "/v1/namespaces?name=hl-*&offset=10&limit=2");
    expect([page1.status, page2.status, past.status]).toEqual([200, 200, 200]);
    expect(page1.body.amount).toBe(3);
    expect(page1.body.namespaces).toHaveLength(2);
    expect(page2.body.namespaces).toHaveLength(1);
    expect(new Set([...names(page1), ...names(page2)])).toEqual(new Set(["hl-alpha", "hl-beta", "hl-gamma"]));
    expect(past.body).toEqual({ amount: 3, namespaces: [] });
  });

  it("never shows tokens, and lists newest modification first", async () => {
    const res = await call("GET", "/v1/namespaces?name=hl-*");
    for (const n of res.body.namespaces) expect(n).not.toHaveProperty("token");
    const mtimes = res.body.namespaces.map((n: { mtime: string }) => n.mtime);
    expect([...mtimes].sort().reverse()).toEqual(mtimes);
  });

  it("answers a bad number with 400 naming the parameter", async () => {
    expect(expectError(await call("GET", "/v1/namespaces?offset=-1"), 400, 3).fields).toEqual(["offset"]);
    expect(expectError(await call("GET", "/v1/namespaces?limit=ten"), 400, 3).fields).toEqual(["limit"]);
  });

  it("needs a key with the namespaces scope", async () => {
    expect(expectError(await t.http("GET", "/v1/namespaces"), 401, 16).reason).toBe("MISSING_CREDENTIALS");
    const faceswapOnly = await createAccountWithKey(t, ["faceswap"]);
    expect(expectError(await t.http("GET", "/v1/namespaces", { token: faceswapOnly.key }), 403, 7).reason).toBe(
      "MISSING_SCOPE",
    );
  });
});

describe("PATCH /v1/namespaces/{name}", () => {
  it("changes only the fields named in ?update_mask", async () => {
    const before = await created("h-upd", { comment: "old", owners: "o1", metadata: { x: "1", y: "2" } });
    const res = await call("PATCH", "/v1/namespaces/h-upd?update_mask=comment,metadata", {
      body: { comment: "new", owners: "ignored", metadata: { z: "3" }, service_export_to: ["ignored"] },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      name: "h-upd",
      id: before.id,
      comment: "new",
      owners: "o1",
      metadata: { z: "3" },
      service_export_to: [],
      ctime: before.ctime,
    });
    expect(res.body).not.toHaveProperty("token");
    expect(res.body.mtime >= before.mtime).toBe(true);
    expect((await call("GET", "/v1/namespaces/h-upd")).body).toEqual(res.body);
  });

  it("takes mask paths in snake_case or lowerCamel, and the mask by its JSON name", async () => {
    await created("h-upd-mask", { metadata: { a: "b" }, sync_to_global_registry: true });
    const snake = await call("PATCH", "/v1/namespaces/h-upd-mask?update_mask=service_export_to,sync_to_global_registry", {
      body: { service_export_to: ["other"] },
    });
    expect(snake.status, JSON.stringify(snake.body)).toBe(200);
    expect(snake.body).toMatchObject({ service_export_to: ["other"], sync_to_global_registry: false, metadata: { a: "b" } });

    const camel = await call("PATCH", "/v1/namespaces/h-upd-mask?updateMask=metadata,serviceExportTo", { body: {} });
    expect(camel.status, JSON.stringify(camel.body)).toBe(200);
    expect(camel.body).toMatchObject({ service_export_to: [], metadata: {} });
  });

  it("joins a mask given twice in the query; refuses another field given twice, and a path no field could have", async () => {
    await created("h-upd-twice", { comment: "old", owners: "o1" });
    const both = await call("PATCH", "/v1/namespaces/h-upd-twice?update_mask=comment&update_mask=owners", { body: { comment: "new", owners: "o2" } });
    expect(both.status, JSON.stringify(both.body)).toBe(200);
    expect(both.body).toMatchObject({ comment: "new", owners: "o2" });
    const twice = await call("GET", "/v1/namespaces?limit=1&limit=2");
    expect(expectError(twice, 400, 3).fields).toEqual(["limit"]);
    expect(twice.body.message).toBe("limit: is given more than once in the query");
    const capital = await call("PATCH", "/v1/namespaces/h-upd-twice?update_mask=Comment", { body: { comment: "x" } });
    expect(expectError(capital, 400, 3).fields).toEqual(["update_mask"]);
    expect(capital.body.details.find((d: { field_violations?: unknown }) => d.field_violations).field_violations[0]).toEqual({
      field: "update_mask",
      description: 'must list field names such as "comment" or "service_export_to", separated by commas (got "Comment")',
    });
  });

  it("without a mask changes the fields present in the body", async () => {
    await created("h-upd2", { comment: "old", owners: "o1" });
    const res = await call("PATCH", "/v1/namespaces/h-upd2", { body: { comment: "new" } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: "h-upd2", comment: "new", owners: "o1" });
  });

  it("selects the namespace by the path, not a name in the body", async () => {
    await created("h-upd3");
    await created("h-upd4", { comment: "untouched" });
    const res = await call("PATCH", "/v1/namespaces/h-upd3", { body: { name: "h-upd4", comment: "changed" } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: "h-upd3", comment: "changed" });
    expect((await call("GET", "/v1/namespaces/h-upd4")).body.comment).toBe("untouched");
  });

  it("works on an encoded name", async () => {
    await created("ops/x:y");
    const res = await call("PATCH", "/v1/namespaces/ops%2Fx%3Ay", { body: { comment: "slashy" } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: "ops/x:y", comment: "slashy" });
  });

  it("answers 400 for bad mask paths and values, 404 for a missing namespace", async () => {
    await created("h-upd5");
    const mask = expectError(await call("PATCH", "/v1/namespaces/h-upd5?update_mask=name,bogus", { body: {} }), 400, 3);
    expect(mask.fields).toEqual(["update_mask.paths[0]", "update_mask.paths[1]"]);
    const value = expectError(await call("PATCH", "/v1/namespaces/h-upd5", { body: { comment: "x".repeat(1025) } }), 400, 3);
    expect(value.fields).toEqual(["namespace.comment"]);
    const missing = await call("PATCH", "/v1/namespaces/h-ghost", { body: { comment: "x" } });
    expect(expectError(missing, 404, 5).reason).toBe("NAMESPACE_NOT_FOUND");
  });

  it("answers 403 to a caller who may not edit", async () => {
    await created("h-guarded", { owners: "someone-else" });
    const stranger = await createAccountWithKey(t, ["namespaces"]);
    const res = await t.http("PATCH", "/v1/namespaces/h-guarded", { token: stranger.key, body: { comment: "x" } });
    expectError(res, 403, 7);
    const seen = await t.http("GET", "/v1/namespaces/h-guarded", { token: stranger.key });
    expect(seen.body).toMatchObject({ editable: false, deleteable: false });
  });
});

describe("DELETE /v1/namespaces/{name}", () => {
  it("deletes, and deleting again still succeeds", async () => {
    await created("h-del");
    const first = await call("DELETE", "/v1/namespaces/h-del");
    expect(first.status).toBe(200);
    expect(first.body).toEqual({});
    expect((await call("GET", "/v1/namespaces/h-del")).status).toBe(404);
    const again = await call("DELETE", "/v1/namespaces/h-del");
    expect(again.status).toBe(200);
    expect(again.body).toEqual({});
  });

  it("deletes an encoded name, and refuses a malformed one", async () => {
    await created("del/me:now");
    expect((await call("DELETE", "/v1/namespaces/del%2Fme%3Anow")).status).toBe(200);
    expect((await call("GET", "/v1/namespaces/del%2Fme%3Anow")).status).toBe(404);
    expect(expectError(await call("DELETE", "/v1/namespaces/bad%20name"), 400, 3).fields).toEqual(["name"]);
  });

  it("refuses while the namespace has services with 400 FAILED_PRECONDITION", async () => {
    const ns = await created("h-busy");
    await t.app.db.insertInto("services").values({ namespace_id: ns.id, name: "svc" }).execute();
    const res = await call("DELETE", "/v1/namespaces/h-busy");
    expect(expectError(res, 400, 9).reason).toBe("NAMESPACE_HAS_SERVICES");
    await t.app.db.deleteFrom("services").where("namespace_id", "=", ns.id).execute();
    expect((await call("DELETE", "/v1/namespaces/h-busy")).status).toBe(200);
  });
});

describe("/v1/namespaces/{name}/token", () => {
  it("reads the token with GET and rotates it with PUT", async () => {
    const ns = await created("h-tok");
    const read = await call("GET", "/v1/namespaces/h-tok/token");
    expect(read.status).toBe(200);
    expect(read.body).toEqual({ name: "h-tok", token: ns.token });

    const rotated = await call("PUT", "/v1/namespaces/h-tok/token");
    expect(rotated.status).toBe(200);
    expect(rotated.body).toEqual({ name: "h-tok", token: expect.stringMatching(TOKEN) });
    expect(rotated.body.token).not.toBe(ns.token);

    const withBody = await call("PUT", "/v1/namespaces/h-tok/token", { body: {} });
    expect(withBody.status).toBe(200);
    expect(withBody.body.token).not.toBe(rotated.body.token);
    expect((await call("GET", "/v1/namespaces/h-tok/token")).body.token).toBe(withBody.body.token);
  });

  it("works on an encoded name", async () => {
    const ns = await created("tok/a:b");
    expect((await call("GET", "/v1/namespaces/tok%2Fa%3Ab/token")).body).toEqual({ name: "tok/a:b", token: ns.token });
  });

  it("answers 404 for a missing namespace and 403 for a stranger", async () => {
    expect(expectError(await call("GET", "/v1/namespaces/h-ghost/token"), 404, 5).reason).toBe("NAMESPACE_NOT_FOUND");
    expect(expectError(await call("PUT", "/v1/namespaces/h-ghost/token"), 404, 5).reason).toBe("NAMESPACE_NOT_FOUND");
    await created("h-tok-guarded", { owners: "someone-else" });
    const stranger = await createAccountWithKey(t, ["namespaces"]);
    expectError(await t.http("GET", "/v1/namespaces/h-tok-guarded/token", { token: stranger.key }), 403, 7);
    expectError(await t.http("PUT", "/v1/namespaces/h-tok-guarded/token", { token: stranger.key }), 403, 7);
  });
});

describe("batches", () => {
  it("POST /v1/namespaces:batchCreate answers one result per item, in order", async () => {
    await created("hb-taken");
    const res = await call("POST", "/v1/namespaces:batchCreate", {
      body: { namespaces: [{ name: "hb-one", comment: "1" }, { name: "hb-taken" }, { name: "hb bad" }, { name: "hb-two" }] },
    });
    expect(res.status).toBe(200);
    const { results } = res.body;
    expect(results).toHaveLength(4);
    expect(results.map((r: { status: unknown }) => r.status)).toEqual([
      { code: 0, message: "", reason: "" },
      { code: 6, message: 'namespace "hb-taken" already exists', reason: "NAMESPACE_EXISTS" },
      { code: 3, message: expect.stringContaining("namespaces[2].name"), reason: "INVALID_ARGUMENT" },
      { code: 0, message: "", reason: "" },
    ]);
    expect(results[0].namespace).toMatchObject({ name: "hb-one", comment: "1", token: expect.stringMatching(TOKEN) });
    expect(results[3].namespace).toMatchObject({ name: "hb-two", token: expect.stringMatching(TOKEN) });
    expect(results[1]).not.toHaveProperty("namespace");
    expect(results[2]).not.toHaveProperty("namespace");
    expect((await call("GET", "/v1/namespaces/hb-one")).status).toBe(200);
  });

  it("POST /v1/namespaces:batchDelete answers one result per name", async () => {
    await created("hbd-1");
    const res = await call("POST", "/v1/namespaces:batchDelete", { body: { names: ["hbd-1", "hbd-missing", "hbd bad"] } });
    expect(res.status).toBe(200);
    expect(res.body.results).toEqual([
      { name: "hbd-1", status: { code: 0, message: "", reason: "" } },
      { name: "hbd-missing", status: { code: 0, message: "", reason: "" } },
      { name: "hbd bad", status: { code: 3, message: expect.any(String), reason: "INVALID_ARGUMENT" } },
    ]);
    expect((await call("GET", "/v1/namespaces/hbd-1")).status).toBe(404);
  });

  it("refuses an empty or oversized batch with 400 naming the list", async () => {
    expect(expectError(await call("POST", "/v1/namespaces:batchCreate", { body: { namespaces: [] } }), 400, 3).fields).toEqual([
      "namespaces",
    ]);
    expect(expectError(await call("POST", "/v1/namespaces:batchCreate", { body: {} }), 400, 3).fields).toEqual(["namespaces"]);
    const names = Array.from({ length: 101 }, (_, i) => `n${i}`);
    expect(expectError(await call("POST", "/v1/namespaces:batchDelete", { body: { names } }), 400, 3).fields).toEqual([
      "names",
    ]);
  });

  it("needs a key with the namespaces scope", async () => {
    expectError(await t.http("POST", "/v1/namespaces:batchDelete", { body: { names: ["x"] } }), 401, 16);
    const webhooksOnly = await createAccountWithKey(t, ["webhooks"]);
    expectError(
      await t.http("POST", "/v1/namespaces:batchCreate", { token: webhooksOnly.key, body: { namespaces: [{ name: "x" }] } }),
      403,
      7,
    );
  });
});

describe("admin routes", () => {
  it("creates an account and a key, lists keys, revokes a key, which then gets 401", async () => {
    const account = await call("POST", "/v1/admin/accounts", { body: { name: "  http user ", group_ids: ["ops", "ops"] } });
    expect(account.status).toBe(200);
    expect(account.body).toEqual({
      id: expect.stringMatching(UUID),
      name: "http user",
      group_ids: ["ops"],
      create_time: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/),
      plan: "free",
      credit_balance: "0",
      credits_reserved: "0",
    });
    const accountId = account.body.id as string;

    const created = await call("POST", `/v1/admin/accounts/${accountId}/keys`, {
      body: { name: "ci", scopes: ["namespaces"] },
    });
    expect(created.status).toBe(200);
    expect(created.body).toEqual({
      api_key: {
        id: expect.stringMatching(UUID),
        account_id: accountId,
        name: "ci",
        scopes: ["namespaces"],
        prefix: created.body.key.slice(0, 12),
        create_time: expect.any(String),
      },
      key: expect.stringMatching(/^atr_[A-Za-z0-9_-]{43}$/),
    });
    const { key } = created.body;
    const keyId = created.body.api_key.id as string;

    const usable = await t.http("POST", "/v1/namespaces", { token: key, body: { name: "h-by-new-key" } });
    expect(usable.status).toBe(200);
    expect(usable.body.owners).toBe(accountId);

    const all = await call("GET", "/v1/admin/keys");
    expect(all.status).toBe(200);
    const listed = all.body.api_keys.find((k: { id: string }) => k.id === keyId);
    expect(listed).toEqual(created.body.api_key);
    expect(JSON.stringify(all.body)).not.toContain(key);
    const mine = await call("GET", `/v1/admin/keys?account_id=${accountId}`);
    expect(mine.body.api_keys.map((k: { id: string }) => k.id)).toEqual([keyId]);

    const revoked = await call("POST", `/v1/admin/keys/${keyId}/revoke`);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ id: keyId, account_id: accountId, revoke_time: expect.any(String) });

    const refused = await t.http("GET", "/v1/namespaces", { token: key });
    expect(expectError(refused, 401, 16).reason).toBe("API_KEY_REVOKED");
  });

  it("lists accounts with paging", async () => {
    const res = await call("GET", "/v1/admin/accounts?limit=1");
    expect(res.status).toBe(200);
    expect(res.body.amount).toBeGreaterThan(1);
    expect(res.body.accounts).toHaveLength(1);
  });

  it("answers bad input with 400 naming fields and unknown ids with 404", async () => {
    expect(expectError(await call("POST", "/v1/admin/accounts", { body: { name: " " } }), 400, 3).fields).toEqual(["name"]);
    const badKey = await call("POST", "/v1/admin/accounts/not-a-uuid/keys", { body: { name: "k", scopes: ["nope"] } });
    expect(expectError(badKey, 400, 3).fields).toEqual(["account_id", "scopes[0]"]);
    const noAccount = await call("POST", "/v1/admin/accounts/00000000-0000-4000-8000-000000000000/keys", {
      body: { name: "k", scopes: ["admin"] },
    });
    expect(expectError(noAccount, 404, 5).reason).toBe("ACCOUNT_NOT_FOUND");
    const noKey = await call("POST", "/v1/admin/keys/00000000-0000-4000-8000-000000000000/revoke");
    expect(expectError(noKey, 404, 5).reason).toBe("API_KEY_NOT_FOUND");
  });

  it("needs the admin scope", async () => {
    expectError(await t.http("GET", "/v1/admin/keys"), 401, 16);
    const nsOnly = await createAccountWithKey(t, ["namespaces"]);
    const res = await t.http("POST", "/v1/admin/accounts", { token: nsOnly.key, body: { name: "sneaky" } });
    expect(expectError(res, 403, 7).reason).toBe("MISSING_SCOPE");
  });
});
