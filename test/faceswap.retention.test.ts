import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, expect, it } from "vitest";
import { AssetJanitor } from "../src/faceswap/asset-janitor.js";
import { LocalBlobStore } from "../src/platform/blobs/local-blob-store.js";
import { createLogger } from "../src/platform/logger.js";
import { MediaProbes } from "../src/platform/media/probes.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { failure } from "./support/expect.js";
import { fundedAccount, uploadFile } from "./support/faceswap.js";
import { makePatternClip, samplePhoto } from "./support/footage.js";

/** Inputs are deleted after the retention unless an open job reads them; outputs are not touched. */

const DAY_MS = 24 * 60 * 60 * 1000;
let t: TestApp;
let dir: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "faceswap-retention-"));
  // Nothing renders, so a queued job keeps reading its inputs for as long as the test needs.
  t = await startTestApp(await createTestDatabase(), { DATA_DIR: path.join(dir, "data"), RENDER_CONCURRENCY: "0" });
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await fs.rm(dir, { recursive: true, force: true });
});

it("deletes expired inputs nobody reads, keeps those of open jobs, and clears old detection crops", async () => {
  const store = new LocalBlobStore(path.join(dir, "data", "blobs"));
  const janitor = new AssetJanitor({
    db: t.app.db,
    store,
    probes: new MediaProbes(t.app.db, store),
    logger: createLogger("silent"),
    retentionMs: 7 * DAY_MS,
    intervalMs: DAY_MS,
  });
  const { accountId, key } = await fundedAccount(t, 1000);
  const clip = await makePatternClip(path.join(dir, "clip.mp4"), 1);
  const [video, face, unused] = await Promise.all([
    uploadFile(t, key, "video", "mp4", clip),
    uploadFile(t, key, "image", "jpg", samplePhoto(2)),
    uploadFile(t, key, "video", "mp4", clip),
  ]);
  const api = t.client(key);
  const { id } = await api.faceSwap.createFaceSwap({
    assets: { videoSource: "file", videoFilePath: video, imageFilePath: face },
    startSeconds: 0,
    endSeconds: 1,
  });
  // A finished detection with one crop.
  const crop = `api-assets/${accountId}/${id}-detection/0-0.png`;
  await store.put(crop, Readable.from(await fs.readFile(samplePhoto(3))), { maxBytes: 1e8 });
  const detection = await api.faceDetection.createFaceDetection({ assets: { targetFilePath: face } });
  await t.app.db
    .updateTable("faceswap_jobs")
    .set({ status: "complete", output_keys: [crop], finished_at: new Date() })
    .where("id", "=", detection.id)
    .execute();

  expect(await janitor.sweep()).toBe(0);
  expect(await store.stat(unused)).toBeDefined();

  const later = new Date(Date.now() + 8 * DAY_MS);
  expect(await janitor.sweep(later)).toBe(2);
  expect(await store.stat(unused)).toBeUndefined();
  expect(await store.stat(crop)).toBeUndefined();
  expect((await api.faceDetection.getFaceDetection({ id: detection.id })).faces).toEqual([]);
  // The queued job's inputs stay.
  expect(await store.stat(video)).toBeDefined();
  expect(await store.stat(face)).toBeDefined();
  const gone = await failure(
    api.faceSwap.createFaceSwap({ assets: { videoSource: "file", videoFilePath: unused, imageFilePath: face }, startSeconds: 0, endSeconds: 1 }),
  );
  expect(gone.fieldViolations.map((v) => v.field)).toEqual(["assets.video_file_path"]);

  await api.videoProjects.cancelVideoProject({ id });
  expect(await janitor.sweep(later)).toBe(2);
  expect(await store.stat(video)).toBeUndefined();
  expect(await store.stat(face)).toBeUndefined();
});
