import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type AtriumClient } from "../src/client/index.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { until } from "./support/expect.js";
import { fundedAccount, uploadFile } from "./support/faceswap.js";
import { makeClip, makePatternClip, samplePhoto } from "./support/footage.js";
import { Receiver } from "./support/receiver.js";
import { ServiceProcess } from "./support/service-process.js";

/**
 * The job runner: claims, leases, credits settled exactly once, events, cancel while rendering, and
 * a replica killed mid-render (the real entry point as child processes sharing one database).
 */

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "atrium-jobs-"));
const cleanup: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => undefined);
  fs.rmSync(dir, { recursive: true, force: true });
});

interface Account {
  key: string;
  client: AtriumClient;
}

/** An account of this test's app with `faceswap` and `webhooks` scopes and `credits` granted. */
async function appAccount(t: TestApp, credits: number): Promise<Account> {
  const { key } = await fundedAccount(t, credits, "free", ["webhooks"]);
  return { key, client: t.client(key) };
}

/** Uploads the clip and a face photo through signed URLs and swaps the first `endSeconds` of it; returns the job id. */
async function createJob(app: Pick<TestApp, "client">, account: Account, clip: string, endSeconds: number): Promise<string> {
  const [video, face] = await Promise.all([
    uploadFile(app, account.key, "video", "mp4", clip),
    uploadFile(app, account.key, "image", "jpg", samplePhoto(2)),
  ]);
  const created = await account.client.faceSwap.createFaceSwap({
    assets: { videoSource: "file", videoFilePath: video, imageFilePath: face },
    startSeconds: 0,
    endSeconds,
  });
  return created.id;
}

async function waitForStatus(account: Account, id: string, statuses: string[], timeoutMs = 60_000) {
  let project!: Awaited<ReturnType<AtriumClient["videoProjects"]["getVideoProject"]>>["project"];
  await until(
    async () => {
      project = (await account.client.videoProjects.getVideoProject({ id })).project;
      return statuses.includes(project!.status);
    },
    timeoutMs,
    `project ${id} ${statuses.join("/")}`,
  );
  return project!;
}

async function ledger(db: pg.Pool, jobId: string): Promise<{ kind: string; amount: number }[]> {
  const { rows } = await db.query("select kind, amount::int from credit_ledger where job_id = $1 order by created_at", [jobId]);
  return rows;
}

describe("one replica", () => {
  let t: TestApp;
  let db: pg.Pool;
  let clip: string;
  let longClip: string;
  beforeAll(async () => {
    const url = await createTestDatabase();
    t = await startTestApp(url, { JOB_POLL_MS: "200" });
    db = new pg.Pool({ connectionString: url, max: 2 });
    cleanup.push(() => t.stop(), () => db.end());
    [clip, longClip] = await Promise.all([
      makeClip(path.join(dir, "clip.mp4"), { seconds: 2, width: 480, audio: true }),
      makePatternClip(path.join(dir, "long.mp4"), 40, "320x240", 25),
    ]);
  });

  it("renders, settles credits to the frames rendered once, and announces video.started and video.completed", async () => {
    const account = await appAccount(t, 500);
    const receiver = await Receiver.start(() => secret);
    cleanup.push(() => receiver.stop());
    const { webhook } = await account.client.webhooks.createWebhook({
      url: receiver.url,
      events: ["video.started", "video.completed", "video.errored"],
    });
    const secret = webhook!.secret;
    const id = await createJob(t, account, clip, 2);

    const project = await waitForStatus(account, id, ["complete", "error"]);
    expect(project.status).toBe("complete");
    // 2 s at 25 fps is 50 frames, quoted as 60 (30 per second): 10 come back.
    expect(project.framesRendered).toBe(50);
    expect(project.creditsCharged).toBe(50);
    expect(await ledger(db, id)).toEqual([
      { kind: "reserve", amount: -60 },
      { kind: "settle", amount: 10 },
    ]);
    const { account: after } = await account.client.account.getAccount({});
    expect(after!.creditBalance).toBe(450);
    expect(after!.creditsReserved).toBe(0);

    const received = await receiver.waitFor(2);
    expect(received.map((r) => r.body.event)).toEqual(["video.started", "video.completed"]);
    expect(received.every((r) => r.signatureValid && r.body.data.id === id)).toBe(true);
    expect(received[1]!.body.data).toMatchObject({ status: "complete", credits_charged: 50, frames_rendered: 50 });
  }, 90_000);

  it("stops a canceled job within a second and refunds all it reserved", async () => {
    const account = await appAccount(t, 5000);
    const id = await createJob(t, account, longClip, 40);
    await until(
      async () => {
        const { project } = await account.client.videoProjects.getVideoProject({ id });
        return project!.status === "rendering";
      },
      30_000,
      "rendering",
    );
    const canceledAt = Date.now();
    const { project } = await account.client.videoProjects.cancelVideoProject({ id });
    expect(project!.status).toBe("canceled");
    await until(async () => t.logs.some((l) => l.event === "job_stopped" && l.job_id === id), 5_000, "job stopped");
    const stopped = t.logs.find((l) => l.event === "job_stopped" && l.job_id === id)!;
    expect(stopped.reason).toBe("canceled");
    expect(Number(new Date(stopped.time as number)) - canceledAt).toBeLessThan(1_000);
    expect(await ledger(db, id)).toEqual([
      { kind: "reserve", amount: -1200 },
      { kind: "settle", amount: 1200 },
    ]);
    const { account: after } = await account.client.account.getAccount({});
    expect(after!.creditBalance).toBe(5000);
    // Canceled stays canceled: the worker's late finish does not overwrite it.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await account.client.videoProjects.getVideoProject({ id })).project!.status).toBe("canceled");
  }, 90_000);
});

describe("replicas", () => {
  const processes: ServiceProcess[] = [];
  cleanup.push(async () => Promise.all(processes.map((p) => p.kill("SIGKILL"))));

  async function replica(databaseUrl: string, dataDir: string, env: Record<string, string>) {
    const service = new ServiceProcess({
      GRPC_PORT: "0",
      HTTP_PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      ADMIN_TOKEN,
      LOG_LEVEL: "info",
      DATABASE_POOL_SIZE: "4",
      SHUTDOWN_GRACE_MS: "2000",
      JOB_POLL_MS: "200",
      JOB_LEASE_MS: "2000",
      ...env,
    });
    processes.push(service);
    const started = await service.waitForEvent("started");
    const address = `127.0.0.1:${started.grpc_port as number}`;
    /** A client of this replica (closed with the test file). */
    const client = (token: string) => {
      const c = createClient({ address, token });
      cleanup.push(async () => c.close());
      return c;
    };
    return { service, admin: client(ADMIN_TOKEN), client };
  }

  it("a replica killed mid-render: the job is claimed again when its lease runs out and settles once", async () => {
    const url = await createTestDatabase();
    const db = new pg.Pool({ connectionString: url, max: 2 });
    cleanup.push(() => db.end());
    const dataDir = path.join(dir, "replicas");
    const clip = await makePatternClip(path.join(dir, "crash.mp4"), 12, "320x240", 25);

    const first = await replica(url, dataDir, {});
    // The replica has its own database, so the account is made through its admin API.
    const { account: created } = await first.admin.admin.createAccount({ name: "jobs", groupIds: [] });
    const accountId = created!.id;
    const { key } = await first.admin.admin.createApiKey({ accountId, name: "jobs", scopes: ["faceswap"] });
    await first.admin.admin.grantCredits({ accountId, amount: 1000, reason: "test" });
    const account = { key, client: first.client(key) };
    const id = await createJob(first, account, clip, 12);
    await until(async () => first.service.logs.some((l) => l.event === "job_started" && l.job_id === id), 30_000, "job started");
    await first.service.kill("SIGKILL");

    const second = await replica(url, dataDir, {});
    const survivor = { key, client: second.client(key) };
    const project = await waitForStatus(survivor, id, ["complete", "error"], 90_000);
    expect(project.status).toBe("complete");
    expect(project.framesRendered).toBe(300);

    const { rows } = await db.query("select attempts from faceswap_jobs where id = $1", [id]);
    expect(rows[0].attempts).toBe(2);
    expect(await ledger(db, id)).toEqual([
      { kind: "reserve", amount: -360 },
      { kind: "settle", amount: 60 },
    ]);
    const { account: after } = await survivor.client.account.getAccount({});
    expect(after!.creditBalance).toBe(700);
    const resumed = second.service.logs.find((l) => l.event === "job_started" && l.job_id === id);
    expect(resumed?.attempt).toBe(2);
  }, 150_000);
});
