import net from "node:net";
import { getOption, toBinary, type DescMethod } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import fc from "fast-check";
import { Agent, fetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registry } from "../src/transport/descriptors.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { binaryMessage, brokenBytes, hostileString, jsonMessage, type Draw } from "./support/hostile.js";

/**
 * Random and hostile requests to every method of every service in the descriptor set, over both
 * transports. Whatever arrives, the answer is a status of the caller's making (never 5xx, INTERNAL
 * or UNKNOWN), every call is answered, and the service is alive after each batch. Deterministic:
 * FUZZ_SEED picks the inputs (fast-check prints the seed and path of a failure to replay it);
 * FUZZ_RUNS sets the requests per method and transport.
 */
const SEED = Number(process.env.FUZZ_SEED ?? 20_261_123);
const RUNS = Number(process.env.FUZZ_RUNS ?? 15);
const CALL_TIMEOUT_MS = 10_000;
const OUR_PACKAGES = ["v1", "auth.v1", "webhook.v1", "faceswap.v1"];

let t: TestApp;
let userKey: string;
let sent = 0;
/** How the answers came out, e.g. `grpc INVALID_ARGUMENT` or `http 404`: printed to show the fuzzer gets past the front door. */
const outcomes = new Map<string, number>();
const tally = (outcome: string) => outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
const clients = new Map<string, grpc.Client>();

beforeAll(async () => {
  // Nothing renders and no webhook reaches a private address: the fuzzer is after the request paths.
  t = await startTestApp(await createTestDatabase(), { RENDER_CONCURRENCY: "0", WEBHOOK_ALLOW_PRIVATE: "false" });
  userKey = (await createAccountWithKey(t, ["namespaces", "webhooks", "faceswap", "events:publish"])).key;
});
afterAll(async () => {
  for (const client of clients.values()) client.close();
  await httpAgent.close();
  await t?.stop();
  const summary = [...outcomes].sort((a, b) => b[1] - a[1]).map(([outcome, n]) => `${outcome} ×${n}`);
  process.stdout.write(`fuzz: ${sent} requests sent (seed ${SEED}, ${RUNS} runs per method and transport): ${summary.join(", ")}\n`);
});

interface HttpBinding {
  verb: string;
  path: string;
  body: string;
}

interface FuzzMethod {
  grpcPath: string;
  desc: DescMethod;
  http: HttpBinding[];
}

const httpRule = registry.getExtension("google.api.http")!;

function fuzzMethods(): FuzzMethod[] {
  const methods: FuzzMethod[] = [];
  for (const file of registry.files) {
    if (!OUR_PACKAGES.includes(file.proto.package)) continue;
    for (const service of file.services) {
      for (const desc of service.methods) {
        const rule = getOption(desc, httpRule) as unknown as RuleLike | undefined;
        const http: HttpBinding[] = [];
        for (const binding of rule?.pattern?.case ? [rule, ...(rule.additionalBindings ?? [])] : []) {
          const { case: verb, value } = binding.pattern;
          if (!verb) continue;
          const custom = verb === "custom" ? (value as { kind: string; path: string }) : undefined;
          http.push({ verb: (custom?.kind ?? verb).toUpperCase(), path: custom?.path ?? (value as string), body: binding.body });
        }
        methods.push({ grpcPath: `/${service.typeName}/${desc.name}`, desc, http });
      }
    }
  }
  return methods;
}

interface RuleLike {
  pattern: { case: string | undefined; value: unknown };
  body: string;
  additionalBindings?: RuleLike[];
}

function credential(g: Draw): string | undefined {
  return g(fc.constantFrom, ADMIN_TOKEN, userKey, undefined, "atr_not-a-key");
}

function grpcClient(): grpc.Client {
  let client = clients.get("raw");
  if (!client) clients.set("raw", (client = new grpc.Client(t.grpcAddress, grpc.credentials.createInsecure())));
  return client;
}

/**
 * One raw call; resolves with its status code (a call left unanswered fails at its deadline). A
 * server stream counts as OK once its first message arrives, and is then cancelled.
 */
function grpcCall(path: string, bytes: Uint8Array, token: string | undefined, streaming = false): Promise<grpc.status> {
  sent++;
  const metadata = new grpc.Metadata();
  if (token) metadata.set("authorization", `Bearer ${token}`);
  if (streaming) {
    return new Promise((resolve) => {
      const call = grpcClient().makeServerStreamRequest(
        path,
        (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength),
        (b: Buffer) => b,
        bytes,
        metadata,
        { deadline: Date.now() + CALL_TIMEOUT_MS },
      );
      let settled = false;
      const settle = (code: grpc.status) => {
        if (settled) return;
        settled = true;
        tally(`grpc ${grpc.status[code]}`);
        resolve(code);
      };
      call.once("data", () => {
        settle(grpc.status.OK);
        call.cancel();
      });
      call.on("error", (error: grpc.ServiceError) => settle(error.code));
      call.once("end", () => settle(grpc.status.OK));
    });
  }
  return new Promise((resolve) => {
    grpcClient().makeUnaryRequest(
      path,
      (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength),
      (b: Buffer) => b,
      bytes,
      metadata,
      { deadline: Date.now() + CALL_TIMEOUT_MS },
      (error) => {
        const code = error ? error.code : grpc.status.OK;
        tally(`grpc ${grpc.status[code]}`);
        resolve(code);
      },
    );
  });
}

/**
 * Connections are reused (a hostile request must not spoil the next one on its connection), but never
 * left idle near the server's 5 s keep-alive, where a reuse can race the server's close (ECONNRESET).
 */
const httpAgent = new Agent({ keepAliveTimeout: 1_000, keepAliveMaxTimeout: 1_000 });

const BAD_GRPC = new Set([grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.DEADLINE_EXCEEDED, grpc.status.UNAVAILABLE, grpc.status.DATA_LOSS]);

async function httpCall(method: string, path: string, body: string | undefined, token: string | undefined): Promise<number> {
  sent++;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(t.httpUrl + path, {
    method,
    headers,
    body,
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    dispatcher: httpAgent,
  });
  await response.arrayBuffer();
  tally(`http ${response.status}`);
  return response.status;
}

/** The path with each `{variable}` replaced by a hostile value, and sometimes a hostile query. */
function hostilePath(binding: HttpBinding, g: Draw): string {
  const path = binding.path.replace(/\{[^}]+\}/g, () => encodeURIComponent(hostileString(g).slice(0, 2_000).toWellFormed()) || "x");
  if (!g(fc.boolean)) return path;
  const query = new URLSearchParams();
  for (let i = g(fc.integer, { min: 1, max: 3 }); i > 0; i--) {
    query.append(g(fc.constantFrom, "limit", "offset", "page_size", "page_token", "account_id", "healthy_only", "status", "x"), hostileString(g).slice(0, 500).toWellFormed());
  }
  return `${path}?${query}`;
}

/** An HTTP/1.1 request written as raw bytes; resolves with the answer's status (0: closed unanswered). */
function rawHttp(request: string): Promise<number> {
  sent++;
  const url = new URL(t.httpUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    let data = "";
    socket.setTimeout(CALL_TIMEOUT_MS, () => socket.destroy());
    socket.on("data", (chunk) => (data += chunk.toString("latin1")));
    socket.on("close", () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1] ?? 0)));
    socket.on("error", reject);
    socket.end(request, "latin1");
  });
}

async function expectAlive(): Promise<void> {
  expect(await httpCall("GET", "/healthz", undefined, undefined)).toBe(200);
  expect(await grpcCall("/grpc.health.v1.Health/Check", new Uint8Array(), undefined)).toBe(grpc.status.OK);
}

const methods = fuzzMethods();

describe("fuzzing every method", () => {
  it("covers every service of the descriptor set", () => {
    expect(methods.length).toBeGreaterThan(30);
    expect(methods.filter((m) => m.http.length > 0).length).toBeGreaterThan(30);
  });

  for (const method of methods) {
    it(`${method.grpcPath} over gRPC and HTTP`, { timeout: 120_000 }, async () => {
      await fc.assert(
        fc.asyncProperty(fc.gen(), async (g) => {
          const token = credential(g);
          const valid = toBinary(method.desc.input, binaryMessage(method.desc.input, g).message);
          const bytes = g(fc.integer, { min: 0, max: 4 }) === 0 ? brokenBytes(valid, g) : valid;
          const code = await grpcCall(method.grpcPath, bytes, token, method.desc.methodKind === "server_streaming");
          expect(BAD_GRPC.has(code), `gRPC answered ${grpc.status[code]}`).toBe(false);
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: true },
      );
      for (const binding of method.http) {
        await fc.assert(
          fc.asyncProperty(fc.gen(), async (g) => {
            const path = hostilePath(binding, g);
            let body: string | undefined;
            if (binding.verb !== "GET" && (binding.body !== "" || g(fc.integer, { min: 0, max: 4 }) === 0)) {
              const kind = g(fc.integer, { min: 0, max: 9 });
              body = kind === 0 ? g(fc.string, { maxLength: 40 }) : kind === 1 ? "" : JSON.stringify(jsonMessage(method.desc.input, g));
            }
            const status = await httpCall(binding.verb, path, body, credential(g));
            expect(status, `${binding.verb} ${path.slice(0, 200)} answered ${status}`).toBeLessThan(500);
          }),
          { seed: SEED, numRuns: RUNS, endOnFailure: true },
        );
      }
      await expectAlive();
    });
  }

  it("logged no internal error along the way", () => {
    const internal = t.logs.filter((line) => /internal_error/.test(String(line.event)));
    expect(internal.map((line) => line.err ?? line)).toEqual([]);
  });

  it("answers odd request targets and methods with a 4xx or a route's answer", async () => {
    const target = fc.oneof(
      fc.constantFrom("http://[", "http://a:99999/x", "http://%zz/", "*", "//", "/%", "/v1/namespaces/%zz", "/?a=%zz", "http://h/healthz?x=%"),
      fc.string({ unit: "binary-ascii", minLength: 1, maxLength: 60 }).map((s) => s.replace(/[\s]/g, "_")),
      fc.webUrl().map((u) => u.replace(/\s/g, "")),
    );
    const verb = fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW");
    await fc.assert(
      fc.asyncProperty(verb, target, async (v, path) => {
        const status = await rawHttp(`${v} ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
        expect(status, `${v} ${path} answered ${status}`).toBeGreaterThan(0);
        expect(status, `${v} ${path} answered ${status}`).toBeLessThan(500);
      }),
      { seed: SEED, numRuns: RUNS * 10, endOnFailure: true },
    );
    await expectAlive();
  });
});
