import http2 from "node:http2";
import net from "node:net";
import { create, fromJson, toBinary, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccountServiceService } from "../gen/auth/v1/account_service.js";
import { defineService } from "../src/transport/call.js";
import { registry } from "../src/transport/descriptors.js";
import { startGrpcServer } from "../src/transport/grpc/server.js";
import { Router } from "../src/transport/router.js";
import { Periodic } from "../src/platform/periodic.js";
import { createLogger } from "../src/platform/logger.js";
import { Metrics } from "../src/platform/metrics.js";
import { ApiError, Code } from "../src/client/index.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { RawClient } from "./bench/raw-client.js";

let t: TestApp;
let raw: RawClient;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
  raw = new RawClient(t.grpcAddress, ADMIN_TOKEN);
});
afterAll(async () => {
  raw?.close();
  await t?.stop();
});

function message(typeName: string): DescMessage {
  const desc = registry.getMessage(typeName);
  if (!desc) throw new Error(`no message ${typeName}`);
  return desc;
}

function encode(typeName: string, init: MessageInitShape<DescMessage>): Uint8Array {
  const desc = message(typeName);
  return toBinary(desc, create(desc, init));
}

/** A raw call's outcome: the status code and the google.rpc.Status details it carried. */
async function rawCall(path: string, bytes: Uint8Array, client = raw) {
  try {
    await client.call(path, bytes);
    return { code: Code.OK, message: "", fields: [] as string[] };
  } catch (error) {
    const e = new ApiError(error as grpc.ServiceError);
    return { code: e.code, message: e.message, fields: e.fieldViolations.map((v) => v.field) };
  }
}

/** Sends raw bytes as an HTTP/1.1 request and returns the status line's code (0 when the connection closed unanswered). */
function rawHttp(request: string): Promise<number> {
  const url = new URL(t.httpUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    let data = "";
    socket.on("data", (chunk) => (data += chunk.toString("latin1")));
    socket.on("close", () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1] ?? 0)));
    socket.on("error", reject);
    socket.write(request);
    socket.end();
  });
}

/** A logger whose JSON lines land in `lines`, parsed. */
function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("info", { write: (line: string) => lines.push(JSON.parse(line)) } as unknown as NodeJS.WritableStream);
  return { lines, logger };
}

async function healthy(): Promise<void> {
  expect((await t.http("GET", "/healthz")).status).toBe(200);
  expect((await t.admin.admin.listAccounts({})).accounts.length).toBeGreaterThan(0);
}

describe("the HTTP listener contains every request's faults", () => {
  it.each(["http://[", "http://a:99999/x", "http://%zz/", "*", "not-a-path"])(
    "answers the request target %s with 400 and keeps serving",
    async (target) => {
      expect(await rawHttp(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).toBe(400);
      await healthy();
    },
  );

  it("still routes an absolute-form target by its path", async () => {
    expect(await rawHttp(`GET http://example.com/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).toBe(200);
  });
});

describe("free text with control characters", () => {
  it("is refused naming the field over HTTP and gRPC, nested fields and map keys included", async () => {
    const { accountId } = await createAccountWithKey(t, ["webhooks"]);
    const http = await t.http("POST", "/v1/admin/accounts", { token: ADMIN_TOKEN, body: { name: "a\u0000b" } });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations).toEqual([
      { field: "name", description: "must not contain control characters (U+0000 at position 1)" },
    ]);
    const reason = await t.http("POST", `/v1/admin/accounts/${accountId}/credits`, {
      token: ADMIN_TOKEN,
      body: { amount: 5, reason: "bell\u0007" },
    });
    expect(reason.status).toBe(400);
    expect(reason.body.message).toContain("reason: must not contain control characters");

    const grpcCall = await rawCall(
      "/auth.v1.AdminService/CreateApiKey",
      encode("auth.v1.CreateApiKeyRequest", { accountId, name: "key\u001b[31m", scopes: ["webhooks"] }),
    );
    expect(grpcCall.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpcCall.fields).toEqual(["name"]);

    const namespaces = await createAccountWithKey(t, ["namespaces"]);
    const comment = await t.http("POST", "/v1/namespaces", { token: namespaces.key, body: { name: "ctl-ns", comment: "a\u0000b" } });
    expect(comment.status).toBe(400);
    expect(comment.body.details[0].field_violations[0].field).toBe("namespace.comment");
  });

  it("keeps tabs and line breaks, and anything but NUL in event data", async () => {
    const ok = await t.http("POST", "/v1/admin/accounts", { token: ADMIN_TOKEN, body: { name: "two\tlines\r\nhere" } });
    expect(ok.status).toBe(200);
    const publisher = await createAccountWithKey(t, ["events:publish"]);
    const published = await t.http("POST", "/api/events", {
      token: publisher.key,
      body: { event: "request.completed", data: { text: "bell\u0007" } },
    });
    expect(published.status).toBe(200);
    const nul = await t.http("POST", "/api/events", {
      token: publisher.key,
      body: { event: "request.completed", data: { list: [{ "x": "a\u0000" }] } },
    });
    expect(nul.status).toBe(400);
    expect(nul.body.details[0].field_violations[0].field).toBe('data["list"][0]["x"]');
  });
});

describe("a credential gRPC cannot carry", () => {
  it("is logged by grpc-js as one JSON line of the service's log, without the key", async () => {
    const { key } = await createAccountWithKey(t, ["namespaces"]);
    const session = http2.connect(`http://${t.grpcAddress}`);
    try {
      const status = await new Promise<string>((resolve, reject) => {
        const request = session.request({
          ":method": "POST",
          ":path": "/v1.NamespaceService/ListNamespaces",
          "content-type": "application/grpc",
          te: "trailers",
          authorization: `Bearer ${key}\u00e9`,
        });
        request.on("trailers", (trailers) => resolve(String(trailers["grpc-status"])));
        request.on("response", (headers) => headers["grpc-status"] !== undefined && resolve(String(headers["grpc-status"])));
        request.on("error", reject);
        request.end(Buffer.alloc(5));
      });
      expect(status).toBe(String(Code.UNAUTHENTICATED));
    } finally {
      session.close();
    }
    const lines = t.logs.filter((line) => line.event === "grpc_js");
    expect(lines.length).toBeGreaterThan(0);
    expect(JSON.stringify(lines)).not.toContain(key);
    expect(String(lines[0]!.message)).toContain("authorization: [redacted]");
  });
});

describe("a map key __proto__", () => {
  // Built from JSON: an object literal's __proto__ sets its prototype instead of a key.
  const withProtoKey = (json: string) => fromJson(message("v1.RegisterInstanceRequest"), JSON.parse(json));

  it("is refused naming the entry over HTTP and gRPC, in metadata and in event data, rather than dropped", async () => {
    const owner = await createAccountWithKey(t, ["namespaces", "events:publish"]);
    const created = await t.http("POST", "/v1/namespaces", { token: owner.key, body: JSON.parse('{"name":"proto-ns","metadata":{"__proto__":"x","a":"b"}}') });
    expect(created.status).toBe(400);
    expect(created.body.details[0].field_violations).toEqual([
      { field: 'namespace.metadata["__proto__"]', description: "key is reserved: JavaScript objects cannot hold it as data" },
    ]);
    expect((await t.http("POST", "/v1/namespaces", { token: owner.key, body: { name: "proto-ns" } })).status).toBe(200);

    const request = withProtoKey('{"namespace":"proto-ns","service":"api","host":"10.0.0.5","port":1,"metadata":{"__proto__":"x"}}');
    const grpcCall = await rawCall("/v1.RegistryService/RegisterInstance", toBinary(message("v1.RegisterInstanceRequest"), request), new RawClient(t.grpcAddress, owner.key));
    expect(grpcCall.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpcCall.fields).toEqual(['metadata["__proto__"]']);

    const published = await t.http("POST", "/api/events", { token: owner.key, body: JSON.parse('{"event":"request.completed","data":{"user":{"__proto__":{"admin":true}}}}') });
    expect(published.status).toBe(400);
    expect(published.body.details[0].field_violations[0].field).toBe('data["user"]["__proto__"]');
  });
});

describe("64-bit integers", () => {
  it.each(["9223372036854775807", "-9223372036854775808", "9007199254740992"])(
    "GrantCredits amount %s is INVALID_ARGUMENT naming amount over both transports",
    async (amount) => {
      const { accountId } = await createAccountWithKey(t, ["webhooks"]);
      const http = await t.http("POST", `/v1/admin/accounts/${accountId}/credits`, {
        token: ADMIN_TOKEN,
        body: { amount, reason: "x" },
      });
      expect(http.status).toBe(400);
      expect(http.body.details[0].field_violations.map((v: { field: string }) => v.field)).toEqual(["amount"]);
      const grpcCall = await rawCall(
        "/auth.v1.AdminService/GrantCredits",
        encode("auth.v1.GrantCreditsRequest", { accountId, amount: BigInt(amount), reason: "x" }),
      );
      expect(grpcCall.code).toBe(Code.INVALID_ARGUMENT);
      expect(grpcCall.fields).toEqual(["amount"]);
    },
  );
});

describe("timestamps", () => {
  it.each([
    [{ seconds: 1_000_000_000_000_000n }, ["expire_time.seconds"]],
    [{ seconds: -62_135_596_801n }, ["expire_time.seconds"]],
    [{ seconds: 4_000_000_000n, nanos: -1 }, ["expire_time.nanos"]],
    [{ seconds: 4_000_000_000n, nanos: 2_000_000_000 }, ["expire_time.nanos"]],
    [{ seconds: 253_402_300_799n, nanos: 999_999_999 }, ["expire_time.nanos"]],
  ])("CreateApiKey expire_time %o is INVALID_ARGUMENT naming %o", async (expireTime, fields) => {
    const { accountId } = await createAccountWithKey(t, ["webhooks"]);
    const grpcCall = await rawCall(
      "/auth.v1.AdminService/CreateApiKey",
      encode("auth.v1.CreateApiKeyRequest", { accountId, name: "k", scopes: ["webhooks"], expireTime }),
    );
    expect(grpcCall.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpcCall.fields).toEqual(fields);
  });

  it("answers an out-of-range RFC 3339 time over HTTP with 400 naming the field", async () => {
    const { accountId } = await createAccountWithKey(t, ["webhooks"]);
    const http = await t.http("POST", `/v1/admin/accounts/${accountId}/keys`, {
      token: ADMIN_TOKEN,
      body: { name: "k", scopes: ["webhooks"], expire_time: "10000-01-01T00:00:00Z" },
    });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations[0].field).toBe("expire_time");
  });

  it("refuses the last nanoseconds of 9999 over HTTP (they round into 10000), and keeps its last millisecond", async () => {
    const { accountId } = await createAccountWithKey(t, ["webhooks"]);
    const key = (expire_time: string) => t.http("POST", `/v1/admin/accounts/${accountId}/keys`, { token: ADMIN_TOKEN, body: { name: "k", scopes: ["webhooks"], expire_time } });
    const late = await key("9999-12-31T23:59:59.9999999Z");
    expect(late.status).toBe(400);
    expect(late.body.details[0].field_violations[0].field).toBe("expire_time.nanos");
    expect((await key("9999-12-31T23:59:59.999Z")).status).toBe(200);
    expect((await t.http("GET", `/v1/admin/keys?account_id=${accountId}`, { token: ADMIN_TOKEN })).status).toBe(200);
  });

  it("refuses a day its month lacks over HTTP, rather than moving it into the next month", async () => {
    const { accountId } = await createAccountWithKey(t, ["webhooks"]);
    const key = (expire_time: string) => t.http("POST", `/v1/admin/accounts/${accountId}/keys`, { token: ADMIN_TOKEN, body: { name: "k", scopes: ["webhooks"], expire_time } });
    const feb30 = await key("2027-02-30T00:00:00Z");
    expect(feb30.status).toBe(400);
    expect(feb30.body.details[0].field_violations).toEqual([
      { field: "expire_time", description: 'is not a real date: February 2027 has 28 days (got "2027-02-30T00:00:00Z")' },
    ]);
    expect((await key("2028-02-29T00:00:00Z")).status).toBe(200);
    expect((await key("2027-04-31T10:00:00+02:00")).body.message).toContain("April 2027 has 30 days");
  });
});

describe("numbers in strings", () => {
  it("are read only in decimal, in the body and in the query", async () => {
    const { accountId } = await createAccountWithKey(t, ["webhooks"]);
    const hex = await t.http("POST", `/v1/admin/accounts/${accountId}/credits`, { token: ADMIN_TOKEN, body: { amount: "0x50", reason: "x" } });
    expect(hex.status).toBe(400);
    expect(hex.body.details[0].field_violations).toEqual([{ field: "amount", description: 'must be an integer, in decimal digits (got "0x50")' }]);
    const owner = await createAccountWithKey(t, ["namespaces"]);
    expect((await t.http("POST", "/v1/namespaces", { token: owner.key, body: { name: "numbers-ns" } })).status).toBe(200);
    const register = await t.http("POST", "/v1/namespaces/numbers-ns/services/api/instances", { token: owner.key, body: { host: "10.0.0.5", port: "0b1010000" } });
    expect(register.body.details[0].field_violations[0].field).toBe("port");
    const query = await t.http("GET", "/v1/namespaces/numbers-ns/services/api/instances?index=0x8&wait=2s", { token: owner.key });
    expect(query.status).toBe(400);
    expect(query.body.details[0].field_violations[0]).toEqual({ field: "index", description: 'must be an integer, in decimal digits (got "0x8")' });
    const decimal = await t.http("POST", `/v1/admin/accounts/${accountId}/credits`, { token: ADMIN_TOKEN, body: { amount: "80", reason: "x" } });
    expect(decimal.status).toBe(200);
  });
});

describe("durations", () => {
  it("over HTTP: only seconds with at most nine decimals and an s", async () => {
    const owner = await createAccountWithKey(t, ["namespaces"]);
    expect((await t.http("POST", "/v1/namespaces", { token: owner.key, body: { name: "durations-ns" } })).status).toBe(200);
    for (const wait of ["0.0000000001s", "1.5sec"]) {
      const query = await t.http("GET", `/v1/namespaces/durations-ns/services/api/instances?index=5&wait=${wait}`, { token: owner.key });
      expect(query.status).toBe(400);
      expect(query.body.details[0].field_violations).toEqual([{ field: "wait", description: `must be a duration string such as "1.5s" (got "${wait}")` }]);
    }
  });

  it.each([
    [{ seconds: 1n, nanos: 2_000_000_000 }, ["wait.nanos"]],
    [{ seconds: 1n, nanos: -500_000_000 }, ["wait.nanos"]],
    [{ seconds: 400_000_000_000n, nanos: 0 }, ["wait.seconds"]],
  ])("over gRPC: ListInstances wait %o is INVALID_ARGUMENT naming %o", async (wait, fields) => {
    const grpcCall = await rawCall("/v1.RegistryService/ListInstances", encode("v1.ListInstancesRequest", { namespace: "durations-ns", service: "api", index: 5n, wait }));
    expect(grpcCall.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpcCall.fields).toEqual(fields);
  });
});

describe("an update that sets nothing", () => {
  it("changes nothing and returns the webhook, over HTTP (empty body, unknown keys) and gRPC", async () => {
    const user = await createAccountWithKey(t, ["webhooks"]);
    const created = await t.http("POST", "/api/webhooks", {
      token: user.key,
      body: { url: "http://127.0.0.1:9/hook", events: ["request.completed"], description: "before" },
    });
    expect(created.status).toBe(200);
    const id = created.body.id as string;
    for (const body of ["", "{}", '{"nonsense":1}']) {
      const put = await t.http("PUT", `/api/webhooks/${id}`, { token: user.key, body });
      expect(put.status).toBe(200);
      expect(put.body).toMatchObject({ id, description: "before", events: ["request.completed"], enabled: true });
    }
    const { webhook } = await t.client(user.key).webhooks.updateWebhook({ webhookId: id, events: [] });
    expect(webhook!.description).toBe("before");
    const missing = await t.http("PUT", "/api/webhooks/00000000-0000-4000-8000-000000000000", { token: user.key, body: "{}" });
    expect(missing.status).toBe(404);
  });
});

describe("malformed protobuf over gRPC", () => {
  it.each([
    ["a truncated varint", Buffer.from([0x10, 0xff])],
    ["a length past the end", Buffer.from([0x0a, 0x7f, 0x61])],
    ["wire type 7", Buffer.from([0x0f, 0x00])],
    ["random bytes", Buffer.from("c3a1ffee00112233deadbeef99887766", "hex")],
  ])("answers %s with INVALID_ARGUMENT", async (_label, bytes) => {
    const result = await rawCall("/auth.v1.AdminService/GrantCredits", bytes);
    expect(result.code).toBe(Code.INVALID_ARGUMENT);
    expect(result.fields).toEqual(["request"]);
  });

  it("answers a Struct nested 10,000 deep with INVALID_ARGUMENT, over gRPC and HTTP", async () => {
    const publisher = await createAccountWithKey(t, ["events:publish"]);
    // Struct{fields{"a": Value{struct_value: Struct{...}}}}: each level's header, sized inside out.
    const headers: Buffer[] = [];
    let size = 0;
    for (let i = 0; i < 10_000; i++) {
      const value = Buffer.concat([Buffer.from([0x2a]), varint(size)]);
      const entry = Buffer.concat([Buffer.from([0x0a, 0x01, 0x61, 0x12]), varint(value.length + size)]);
      const header = Buffer.concat([Buffer.from([0x0a]), varint(entry.length + value.length + size)]);
      headers.push(Buffer.concat([header, entry, value]));
      size += header.length + entry.length + value.length;
    }
    const struct = Buffer.concat(headers.reverse());
    const request = Buffer.concat([encode("webhook.v1.PublishEventRequest", { event: "request.completed" }), Buffer.from([0x12]), varint(struct.length), struct]);
    const client = new RawClient(t.grpcAddress, publisher.key);
    try {
      const result = await rawCall("/webhook.v1.WebhookService/PublishEvent", request, client);
      expect(result.code).toBe(Code.INVALID_ARGUMENT);
    } finally {
      client.close();
    }
    const deepJson = `{"event":"request.completed","data":${'{"a":'.repeat(10_000)}1${"}".repeat(10_000)}}`;
    const http = await t.http("POST", "/api/events", { token: publisher.key, body: deepJson });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations[0].field).toBe("body");
    await healthy();
  });
});

function varint(n: number): Buffer {
  const bytes: number[] = [];
  while (n > 0x7f) {
    bytes.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  bytes.push(n);
  return Buffer.from(bytes);
}

describe("many bad fields", () => {
  it("are reported up to a bound, and the call is answered over gRPC and HTTP", async () => {
    const publisher = await createAccountWithKey(t, ["events:publish"]);
    const data = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`key${i}`, "nul\u0000"]));
    const client = new RawClient(t.grpcAddress, publisher.key);
    try {
      const result = await rawCall(
        "/webhook.v1.WebhookService/PublishEvent",
        encode("webhook.v1.PublishEventRequest", { event: "request.completed", data }),
        client,
      );
      expect(result.code).toBe(Code.INVALID_ARGUMENT);
      expect(result.fields.length).toBe(20);
      expect(result.fields[0]).toBe('data["key0"]');
      expect(result.message).toMatch(/; and 19980 more$/);
    } finally {
      client.close();
    }
    const http = await t.http("POST", "/api/events", { token: publisher.key, body: { event: "request.completed", data } });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations.length).toBe(20);
  });
});

describe("huge ids", () => {
  it("are answered with a bounded message, and the connection keeps serving", async () => {
    const user = await createAccountWithKey(t, ["faceswap"]);
    const client = t.client(user.key);
    const id = "x".repeat(100_000);
    const error = await client.faceDetection.getFaceDetection({ id }).then(
      () => undefined,
      (e: { code: number; message: string }) => e,
    );
    expect(error?.code).toBe(Code.NOT_FOUND);
    expect(error!.message.length).toBeLessThan(1100);
    // The same client (one HTTP/2 connection) goes on answering.
    const again = await client.faceDetection.getFaceDetection({ id: "00000000-0000-4000-8000-000000000000" }).then(
      () => undefined,
      (e: { code: number }) => e.code,
    );
    expect(again).toBe(Code.NOT_FOUND);
    // Cut where a surrogate pair would split, the message used to hold half an emoji, which grpc-js
    // could not put in its trailer: the call went unanswered.
    for (const emojiId of ["😀".repeat(5_000), `x${"😀".repeat(5_000)}`]) {
      const cut = await client.faceDetection.getFaceDetection({ id: emojiId }).then(
        () => undefined,
        (e: { code: number; message: string }) => e,
      );
      expect(cut?.code).toBe(Code.NOT_FOUND);
      expect(cut!.message.isWellFormed()).toBe(true);
    }
    // Node's own header limit (16 KiB) answers 431 to a longer request line.
    const http = await t.http("GET", `/v1/face-detection/${id.slice(0, 10_000)}`, { token: user.key });
    expect(http.status).toBe(404);
    expect(JSON.stringify(http.body).length).toBeLessThan(2000);
  });
});

describe("authority to publish", () => {
  it("lets an events:publish key publish only into its own account; an admin key into any", async () => {
    const a = await createAccountWithKey(t, ["events:publish"]);
    const b = await createAccountWithKey(t, ["events:publish"]);
    const cross = await t.http("POST", "/api/events", {
      token: a.key,
      body: { event: "request.completed", account_id: b.accountId },
    });
    expect(cross.status).toBe(403);
    expect(cross.body.details.at(-1).reason).toBe("CROSS_ACCOUNT_PUBLISH");
    const own = await t.http("POST", "/api/events", { token: a.key, body: { event: "request.completed", account_id: a.accountId } });
    expect(own.status).toBe(200);
    const byAdmin = await t.http("POST", "/api/events", {
      token: ADMIN_TOKEN,
      body: { event: "request.completed", account_id: b.accountId },
    });
    expect(byAdmin.status).toBe(200);
  });
});

describe("a gRPC handler's own fault", () => {
  it("is answered INTERNAL with the request id, logged, and the server keeps serving", async () => {
    const { lines, logger } = capturingLogger();
    let calls = 0;
    const faulty = defineService(AccountServiceService, "authenticated", {
      getAccount: async () => {
        calls++;
        if (calls === 1) throw new TypeError("a bug in the handler");
        return { account: undefined };
      },
    } as never);
    const router = new Router({
      services: [faulty],
      authenticate: async () => ({ accountId: "a", scopes: new Set(), namespace: undefined }) as never,
      // No key changes while this server runs.
      keyChanges: () => () => undefined,
      logger,
      metrics: new Metrics(),
    });
    const server = await startGrpcServer(router, "127.0.0.1", 0);
    const client = new RawClient(`127.0.0.1:${server.port}`);
    try {
      const first = await rawCall("/auth.v1.AccountService/GetAccount", new Uint8Array(), client);
      expect(first.code).toBe(Code.INTERNAL);
      expect(first.message).toMatch(/^internal error \(request id [0-9a-f-]{36}\)$/);
      expect(lines.some((l) => l.event === "rpc_internal_error")).toBe(true);
      const second = await rawCall("/auth.v1.AccountService/GetAccount", new Uint8Array(), client);
      expect(second.code).toBe(Code.OK);
    } finally {
      client.close();
      await server.shutdown(100);
    }
  });
});

describe("a background task's fault", () => {
  it("is logged and the task runs again, whether it throws at once or rejects", async () => {
    const { lines, logger } = capturingLogger();
    let runs = 0;
    const periodic = new Periodic(
      () => {
        runs++;
        if (runs % 2 === 1) throw new Error("thrown at once");
        return Promise.reject(new Error("rejected"));
      },
      logger,
      "task_failed",
    );
    periodic.start(5);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await periodic.stop();
    expect(runs).toBeGreaterThanOrEqual(3);
    expect(lines.filter((l) => l.event === "task_failed").length).toBeGreaterThanOrEqual(3);
  });
});
