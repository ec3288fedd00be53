import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { Metrics } from "../src/platform/metrics.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase, query } from "./support/database.js";
import { failure } from "./support/expect.js";
import { api, expectOk, fundedAccount, uploadFile } from "./support/faceswap.js";
import { makePatternClip, samplePhoto } from "./support/footage.js";
import { Receiver } from "./support/receiver.js";

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the text format's sample lines (HELP/TYPE lines are checked separately). */
function parse(text: string): Sample[] {
  return text
    .split("\n")
    .filter((line) => line !== "" && !line.startsWith("#"))
    .map((line) => {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!match) throw new Error(`not a sample line: ${line}`);
      const labels: Record<string, string> = {};
      for (const [, name, raw] of (match[2] ?? "").matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[name!] = raw!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
      }
      return { name: match[1]!, labels, value: match[3] === "+Inf" ? Infinity : Number(match[3]) };
    });
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value ?? 0;
}

/** Each series of `name` (its labels as JSON) to its value. */
function series(samples: Sample[], name: string): Map<string, number> {
  return new Map(samples.filter((s) => s.name === name).map((s) => [JSON.stringify(s.labels), s.value]));
}

/** How far each series of `name` moved between two scrapes, leaving out those that did not. */
function moved(before: Sample[], after: Sample[], name: string): Record<string, number> {
  const was = series(before, name);
  const delta: Record<string, number> = {};
  for (const [key, now] of series(after, name)) if (now !== (was.get(key) ?? 0)) delta[key] = now - (was.get(key) ?? 0);
  return delta;
}

describe("text format", () => {
  it("escapes label values and HELP, and renders cumulative histograms with +Inf", async () => {
    const metrics = new Metrics();
    const counter = metrics.counter("t_total", "Help with \\ and\nnewline.", ["v"]);
    counter.inc({ v: 'a "quoted" \\ back\nslash' }, 2);
    counter.inc({ v: "plain" });
    const histogram = metrics.histogram("t_seconds", "Durations.", ["m"], [0.1, 1]);
    for (const x of [0.05, 0.1, 0.5, 3]) histogram.observe({ m: "x" }, x);
    metrics.collected("t_gauge", "A gauge.", "gauge", [], () => [{ labels: {}, value: 7 }]);
    metrics.counter("t_unused_total", "Never incremented.");

    expect(await metrics.render()).toBe(
      [
        "# HELP t_total Help with \\\\ and\\nnewline.",
        "# TYPE t_total counter",
        't_total{v="a \\"quoted\\" \\\\ back\\nslash"} 2',
        't_total{v="plain"} 1',
        "# HELP t_seconds Durations.",
        "# TYPE t_seconds histogram",
        't_seconds_bucket{m="x",le="0.1"} 2',
        't_seconds_bucket{m="x",le="1"} 3',
        't_seconds_bucket{m="x",le="+Inf"} 4',
        't_seconds_sum{m="x"} 3.65',
        't_seconds_count{m="x"} 4',
        "# HELP t_gauge A gauge.",
        "# TYPE t_gauge gauge",
        "t_gauge 7",
        "# HELP t_unused_total Never incremented.",
        "# TYPE t_unused_total counter",
        "",
      ].join("\n"),
    );
    expect(parse(await metrics.render()).find((s) => s.name === "t_total")!.labels.v).toBe('a "quoted" \\ back\nslash');
  });

  it("lists a held series only once it is added to, and adds to the same series as by labels", async () => {
    const metrics = new Metrics();
    const counter = metrics.counter("h_total", "Held.", ["v"]);
    const histogram = metrics.histogram("h_seconds", "Held.", ["m"], [1]);
    const held = counter.seriesOf({ v: "a" });
    const observed = histogram.seriesOf({ m: "x" });
    counter.seriesOf({ v: "never" });
    expect(parse(await metrics.render())).toEqual([]);

    held.inc();
    counter.inc({ v: "a" }, 2);
    held.inc(3);
    observed.observe(0.5);
    histogram.observe({ m: "x" }, 2);
    expect(parse(await metrics.render())).toEqual([
      { name: "h_total", labels: { v: "a" }, value: 6 },
      { name: "h_seconds_bucket", labels: { m: "x", le: "1" }, value: 1 },
      { name: "h_seconds_bucket", labels: { m: "x", le: "+Inf" }, value: 2 },
      { name: "h_seconds_sum", labels: { m: "x" }, value: 2.5 },
      { name: "h_seconds_count", labels: { m: "x" }, value: 2 },
    ]);
  });

  it("refuses a name registered twice", () => {
    const metrics = new Metrics();
    metrics.counter("dup_total", "x");
    expect(() => metrics.counter("dup_total", "y")).toThrow(/twice/);
  });
});

describe("GET /metrics", () => {
  let t: TestApp;
  let dir: string;

  beforeAll(async () => {
    // Jobs stay queued: the queue gauge and the cancel counter are what is checked.
    t = await startTestApp(await createTestDatabase(), { RENDER_CONCURRENCY: "0" });
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "metrics-test-"));
  });
  afterAll(async () => {
    await t?.stop();
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  });

  const scrape = async (): Promise<Sample[]> => {
    const response = await fetch(`${t.httpUrl}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    return parse(await response.text());
  };

  it("counts and logs a call whose answer cannot be encoded as INTERNAL, as its caller is answered, not OK", async () => {
    // A timestamp past 9999 has no JSON form. Input refuses one now; a row written before could hold it.
    const { accountId } = await createAccountWithKey(t, ["faceswap"]);
    await query(t.config.databaseUrl!, "update api_keys set expires_at = '10000-01-02T00:00:00Z' where account_id = $1", [accountId]);
    const before = await scrape();
    const answer = await t.http("GET", `/v1/admin/keys?account_id=${accountId}`, { token: ADMIN_TOKEN });
    const after = await scrape();

    expect(answer.status).toBe(500);
    const requestId = answer.headers.get("x-request-id");
    expect(JSON.stringify(answer.body)).toContain(requestId);
    expect(moved(before, after, "atrium_rpc_requests_total")).toEqual({
      [JSON.stringify({ method: "/auth.v1.AdminService/ListApiKeys", code: "INTERNAL", transport: "http" })]: 1,
    });
    const logged = t.logs.filter((line) => line.request_id === requestId);
    expect(logged.find((line) => line.event === "rpc")).toMatchObject({ code: "INTERNAL", transport: "http" });
    expect(logged.some((line) => line.event === "rpc_internal_error")).toBe(true);
    // Over gRPC the same keys have an answer: a Timestamp's seconds reach far past 9999.
    expect((await t.admin.admin.listApiKeys({ accountId })).apiKeys).toHaveLength(1);
  });

  it("counts every gRPC and HTTP call once, by method, code and transport", async () => {
    const before = await scrape();
    await t.admin.namespaces.listNamespaces({});
    await t.admin.namespaces.listNamespaces({});
    const error = await failure(t.admin.webhooks.createWebhook({ url: "" }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect((await t.http("GET", "/v1/namespaces", { token: ADMIN_TOKEN })).status).toBe(200);
    const after = await scrape();

    const list = "/v1.NamespaceService/ListNamespaces";
    const create = "/webhook.v1.WebhookService/CreateWebhook";
    // Scrapes themselves are not RPCs: nothing else moved.
    expect(moved(before, after, "atrium_rpc_requests_total")).toEqual({
      [JSON.stringify({ method: list, code: "OK", transport: "grpc" })]: 2,
      [JSON.stringify({ method: create, code: "INVALID_ARGUMENT", transport: "grpc" })]: 1,
      [JSON.stringify({ method: list, code: "OK", transport: "http" })]: 1,
    });
    expect(moved(before, after, "atrium_rpc_duration_seconds_count")).toEqual({
      [JSON.stringify({ method: list, transport: "grpc" })]: 2,
      [JSON.stringify({ method: create, transport: "grpc" })]: 1,
      [JSON.stringify({ method: list, transport: "http" })]: 1,
    });

    // Every histogram series: buckets never decrease, +Inf is the count, count is the requests of that method.
    const counts = after.filter((s) => s.name === "atrium_rpc_duration_seconds_count");
    expect(counts.length).toBeGreaterThan(0);
    for (const { labels, value: count } of counts) {
      const buckets = after.filter(
        (s) => s.name === "atrium_rpc_duration_seconds_bucket" && s.labels.method === labels.method && s.labels.transport === labels.transport,
      );
      expect(buckets.map((b) => b.labels.le)).toEqual(["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]);
      for (let i = 1; i < buckets.length; i++) expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
      expect(buckets.at(-1)!.value).toBe(count);
      const requests = after
        .filter((s) => s.name === "atrium_rpc_requests_total" && s.labels.method === labels.method && s.labels.transport === labels.transport)
        .reduce((sum, s) => sum + s.value, 0);
      expect(count).toBe(requests);
      expect(value(after, "atrium_rpc_duration_seconds_sum", labels)).toBeGreaterThan(0);
    }

    expect(value(after, "process_resident_memory_bytes")).toBeGreaterThan(1e6);
    expect(value(after, "process_cpu_seconds_total")).toBeGreaterThan(0);
    expect(after.some((s) => s.name === "nodejs_eventloop_lag_seconds")).toBe(true);
  });

  it("shows queued jobs and counts a cancel", async () => {
    const user = await fundedAccount(t, 1000);
    const [video, image] = await Promise.all([
      uploadFile(t, user.key, "video", "mp4", await makePatternClip(path.join(dir, "clip.mp4"), 1)),
      uploadFile(t, user.key, "image", "jpg", samplePhoto(2)),
    ]);
    const before = await scrape();
    expect(value(before, "atrium_faceswap_jobs", { status: "queued" })).toBe(0);
    expect(value(before, "atrium_faceswap_jobs", { status: "rendering" })).toBe(0);

    const client = api(t, "grpc", user.key);
    const created = await client.createFaceSwap({
      assets: { video_source: "file", video_file_path: video, image_file_path: image },
      start_seconds: 0,
      end_seconds: 1,
    });
    expectOk(created);
    expect(value(await scrape(), "atrium_faceswap_jobs", { status: "queued" })).toBe(1);

    expectOk(await client.cancel(created.body.id));
    const after = await scrape();
    expect(value(after, "atrium_faceswap_jobs", { status: "queued" })).toBe(0);
    expect(moved(before, after, "atrium_faceswap_jobs_finished_total")).toEqual({
      [JSON.stringify({ type: "FACE_SWAP", status: "canceled" })]: 1,
    });
  });

  it("counts webhook delivery attempts by outcome", async () => {
    const receiver = await Receiver.start(() => "");
    try {
      const before = await scrape();
      const live = await t.admin.webhooks.createWebhook({ url: receiver.url });
      expect((await t.admin.webhooks.testWebhook({ webhookId: live.webhook!.id })).delivered).toBe(true);
      const dead = await t.admin.webhooks.createWebhook({ url: "http://127.0.0.1:9/closed" });
      expect((await t.admin.webhooks.testWebhook({ webhookId: dead.webhook!.id })).delivered).toBe(false);
      expect(moved(before, await scrape(), "atrium_webhook_deliveries_total")).toEqual({
        [JSON.stringify({ outcome: "delivered" })]: 1,
        [JSON.stringify({ outcome: "failed" })]: 1,
      });
    } finally {
      await receiver.stop();
    }
  });

  it("takes an admin key: 401 without one, 403 with a key of other scopes", async () => {
    const user = await createAccountWithKey(t, ["namespaces", "webhooks"]);
    const without = await t.http("GET", "/metrics");
    expect(without.status).toBe(401);
    expect(without.body).toMatchObject({ code: Code.UNAUTHENTICATED });
    expect((await t.http("GET", "/metrics", { token: "not-a-valid-key-0123456789" })).status).toBe(401);
    const other = await t.http("GET", "/metrics", { token: user.key });
    expect(other.status).toBe(403);
    expect(other.body).toMatchObject({ code: Code.PERMISSION_DENIED });
  });

  it("is open with METRICS_PUBLIC=true", async () => {
    const open = await startTestApp(t.config.databaseUrl!, { METRICS_PUBLIC: "true", RENDER_CONCURRENCY: "0" });
    try {
      const response = await open.http("GET", "/metrics");
      expect(response.status).toBe(200);
      expect(response.body).toContain("# TYPE atrium_rpc_requests_total counter");
    } finally {
      await open.stop();
    }
  });
});
