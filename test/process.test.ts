import { readFileSync } from "node:fs";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiError, Code, createClient } from "../src/client/index.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { freePort } from "../src/platform/free-port.js";
import { ServiceProcess } from "./support/service-process.js";


/** Stops a PostgreSQL that a killed service left behind in dataDir (only after a failed test). */
function stopLeftoverPostgres(dataDir: string): void {
  try {
    const pid = Number(readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[0]);
    if (Number.isInteger(pid) && pid > 0) process.kill(pid, "SIGINT");
  } catch {
    // no server left running
  }
}

describe("the service process (embedded PostgreSQL)", () => {
  let dataDir: string;
  const started: ServiceProcess[] = [];

  const start = async (env: Record<string, string> = {}) => {
    const grpcPort = await freePort();
    const httpPort = await freePort();
    const service = new ServiceProcess({
      GRPC_PORT: String(grpcPort),
      HTTP_PORT: String(httpPort),
      HOST: "127.0.0.1",
      DATA_DIR: dataDir,
      ADMIN_TOKEN,
      LOG_LEVEL: "info",
      ...env,
    });
    started.push(service);
    return { service, grpcPort, httpPort };
  };

  beforeAll(async () => {
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "atrium-process-"));
    // As root the embedded PostgreSQL runs as `postgres`, which must be able to enter the folder.
    await fs.chmod(dataDir, 0o755);
  });
  afterAll(async () => {
    for (const service of started) if (service.running) await service.terminate(10_000);
    stopLeftoverPostgres(dataDir);
    await sleep(200);
    await fs.rm(dataDir, { recursive: true, force: true });
  });

  it("starts, serves, stops cleanly on SIGTERM, and keeps its data across a restart", { timeout: 120_000 }, async () => {
    // First start: creates the cluster.
    const first = await start();
    const startedLine = await first.service.waitForEvent("started");
    expect(startedLine).toMatchObject({ grpc_port: first.grpcPort, http_port: first.httpPort, level: "info" });
    expect(first.service.logs.find((l) => l.event === "embedded_postgres_started")).toMatchObject({ created: true });

    const created = await fetch(`http://127.0.0.1:${first.httpPort}/v1/namespaces`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "durable", comment: "written by the first process" }),
    });
    expect(created.status).toBe(200);
    const body = (await created.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ name: "durable", comment: "written by the first process" });
    expect(body.token).toMatch(/^[0-9a-f]{32}$/);

    // gRPC on the same process sees it.
    const grpcClient = createClient({ address: `127.0.0.1:${first.grpcPort}`, token: ADMIN_TOKEN });
    try {
      const { namespace } = await grpcClient.namespaces.getNamespace({ name: "durable" });
      expect(namespace!.id).toBe(body.id);
    } finally {
      grpcClient.close();
    }

    const firstExit = await first.service.terminate();
    expect(firstExit).toEqual({ code: 0, signal: null });
    const events = first.service.logs.map((l) => l.event);
    expect(events).toContain("stopping");
    expect(events.at(-1)).toBe("stopped");
    expect(events.indexOf("signal")).toBeLessThan(events.indexOf("stopped"));
    // The embedded server was stopped too: its lock file is gone.
    await expect(fs.access(path.join(dataDir, "postgres", "postmaster.pid"))).rejects.toThrow();

    // Second start on the same DATA_DIR: reuses the cluster and its data.
    const second = await start();
    await second.service.waitForEvent("started");
    expect(second.service.logs.find((l) => l.event === "embedded_postgres_started")).toMatchObject({ created: false });
    expect(second.service.logs.filter((l) => l.event === "bootstrap_admin_key")).toEqual([]);
    const read = await fetch(`http://127.0.0.1:${second.httpPort}/v1/namespaces/durable`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(read.status).toBe(200);
    expect(await read.json()).toMatchObject({ id: body.id, name: "durable", comment: "written by the first process" });

    const secondExit = await second.service.terminate();
    expect(secondExit).toEqual({ code: 0, signal: null });
    expect(second.service.logs.at(-1)).toMatchObject({ event: "stopped" });

    // Every stdout line of both runs is one JSON object with a level and a time.
    for (const service of [first.service, second.service]) {
      expect(service.stdoutLines.length).toBeGreaterThan(3);
      for (const line of service.logs) {
        expect(line).toMatchObject({ service: "atrium", level: expect.any(String), time: expect.any(String) });
      }
    }
  });

  it("refuses a DATA_DIR another running service uses, and leaves that service's database alone", { timeout: 120_000 }, async () => {
    const first = await start();
    await first.service.waitForEvent("started");
    const second = await start();
    const { code } = await second.service.exited;
    expect(code).not.toBe(0);
    expect(second.service.stderr).toContain("is in use by another running service");
    const read = await fetch(`http://127.0.0.1:${first.httpPort}/v1/namespaces?limit=1`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(read.status).toBe(200);
    expect(first.service.logs.map((l) => l.event)).not.toContain("db_idle_connection_error");
    expect(await first.service.terminate()).toEqual({ code: 0, signal: null });
  });

  it("exits with code 2 and names the variable when the configuration is invalid", { timeout: 60_000 }, async () => {
    const { service } = await start({ GRPC_PORT: "abc", HTTP_PORT: "99999", LOG_LEVEL: "loud" });
    const { code } = await service.exited;
    expect(code).toBe(2);
    expect(service.stderr).toContain("GRPC_PORT");
    expect(service.stderr).toContain('"abc"');
    // All problems at once, not just the first.
    expect(service.stderr).toContain("HTTP_PORT");
    expect(service.stderr).toContain("LOG_LEVEL");
    expect(service.stderr).not.toMatch(/\n\s+at /); // no stack trace
    expect(service.stdoutLines).toEqual([]);
  });

  it("exits with code 2 when an S3 setting is given without S3_BUCKET", { timeout: 60_000 }, async () => {
    const { service } = await start({ S3_REGION: "eu-west-1", S3_PREFIX: "media" });
    expect((await service.exited).code).toBe(2);
    expect(service.stderr).toContain("S3_REGION: has no effect without S3_BUCKET");
    expect(service.stderr).toContain("S3_PREFIX");
  });

  it("exits with code 2 on a WEBHOOK_RETENTION_DAYS shorter than an idempotency key lives", { timeout: 60_000 }, async () => {
    const { service } = await start({ WEBHOOK_RETENTION_DAYS: "1" });
    expect((await service.exited).code).toBe(2);
    expect(service.stderr).toContain('WEBHOOK_RETENTION_DAYS: must be an integer from 2 to 3650, got "1"');
  });

  it("exits with code 2 on a bad ADMIN_TOKEN without starting the database", { timeout: 60_000 }, async () => {
    const { service } = await start({ ADMIN_TOKEN: "short" });
    expect((await service.exited).code).toBe(2);
    expect(service.stderr).toContain("ADMIN_TOKEN");
    expect(service.stderr).not.toContain("short");
    // No header could carry it.
    const accented = await start({ ADMIN_TOKEN: "tokén-with-ü-0123456" });
    expect((await accented.service.exited).code).toBe(2);
    expect(accented.service.stderr).toContain("ADMIN_TOKEN: must be 16..200 visible ASCII characters");
  });
});

describe("deadlines", () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp(await createTestDatabase());
  });
  afterAll(async () => {
    await t?.stop();
  });

  async function failure(call: Promise<unknown>): Promise<ApiError> {
    const error = await call.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ApiError);
    return error as ApiError;
  }

  it.each([-1_000, 0, 1])("a call with a deadline %d ms away fails DEADLINE_EXCEEDED", async (timeoutMs) => {
    const error = await failure(t.admin.namespaces.listNamespaces({}, { timeoutMs }));
    expect(error.code).toBe(Code.DEADLINE_EXCEEDED);
  });

  it("a generous deadline does not get in the way", async () => {
    const { namespaces } = await t.admin.namespaces.listNamespaces({}, { timeoutMs: 10_000 });
    expect(namespaces).toEqual([]);
  });

  it("the server refuses a call whose deadline passed before it started, without running it", async () => {
    // grpc-js clients do not send calls that are already late, so this one goes out by hand: an
    // HTTP/2 gRPC request with a 1 ns grpc-timeout.
    const http2 = await import("node:http2");
    const session = http2.connect(`http://${t.grpcAddress}`);
    try {
      const { CreateNamespaceRequest } = await import("../gen/v1/namespace_service.js");
      const message = Buffer.from(CreateNamespaceRequest.encode(CreateNamespaceRequest.fromPartial({ namespace: { name: "too-late" } })).finish());
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
      frame.writeUInt32BE(message.length, 1);
      const stream = session.request({
        ":method": "POST",
        ":path": "/v1.NamespaceService/CreateNamespace",
        "content-type": "application/grpc",
        te: "trailers",
        "grpc-timeout": "1n",
        authorization: `Bearer ${ADMIN_TOKEN}`,
      });
      const status = await new Promise<string | undefined>((resolve, reject) => {
        let fromHeaders: string | undefined;
        stream.on("response", (headers) => (fromHeaders = headers["grpc-status"] as string | undefined));
        stream.on("trailers", (trailers) => resolve(trailers["grpc-status"] as string));
        stream.on("end", () => resolve(fromHeaders));
        stream.on("error", reject);
        stream.resume();
        stream.end(frame);
      });
      expect(status).toBe(String(Code.DEADLINE_EXCEEDED));
    } finally {
      session.close();
    }
    await sleep(100);
    expect((await failure(t.admin.namespaces.getNamespace({ name: "too-late" }))).code).toBe(Code.NOT_FOUND);
    const line = t.logs.findLast((l) => l.event === "rpc" && l.method === "/v1.NamespaceService/CreateNamespace");
    expect(line).toMatchObject({ code: "DEADLINE_EXCEEDED", message: "deadline exceeded before the call started" });
  });
});
