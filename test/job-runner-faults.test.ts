import { afterAll, beforeAll, it } from "vitest";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { until } from "./support/expect.js";
import { fundedAccount, uploadFile } from "./support/faceswap.js";
import { samplePhoto } from "./support/footage.js";

// A render worker whose job fails outside the job's own handling (here: no scratch folder can be made)
// logs it and goes on; the job's lease runs out and the job is claimed again once the fault is gone.

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase(), { RENDER_CONCURRENCY: "1", JOB_POLL_MS: "50", JOB_LEASE_MS: "500" });
}, 60_000);

afterAll(async () => {
  await t?.stop();
});

it("logs a job run that fails before the job starts, keeps the worker going, and runs the job later", async () => {
  const { key } = await fundedAccount(t, 100);
  const face = await uploadFile(t, key, "image", "jpg", samplePhoto(2));
  const tmpdir = process.env.TMPDIR;
  process.env.TMPDIR = "/nonexistent/atrium-test";
  let id: string;
  try {
    ({ id } = await t.client(key).faceDetection.createFaceDetection({ assets: { targetFilePath: face } }));
    await until(() => t.logs.some((l) => l.event === "job_run_failed" && l.job_id === id), 10_000, "the failed run to be logged");
  } finally {
    if (tmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = tmpdir;
  }
  await until(() => t.logs.some((l) => l.event === "job_started" && l.job_id === id), 10_000, "the job to be claimed again");
});
