import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { probeMedia } from "../src/platform/media/ffmpeg.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { until } from "./support/expect.js";
import { fundedAccount, uploadFile } from "./support/faceswap.js";
import { makeClip, samplePhoto } from "./support/footage.js";
import { startS3Server, type S3Server } from "./support/s3.js";

/**
 * The whole face swap flow with S3_BUCKET set: uploads through the signed /blobs/ route land in the
 * bucket, the probe and the render read them from it, the output goes back to it, and downloads are
 * the bucket's own presigned URLs.
 */

const BUCKET = "atrium-faceswap";
let s3: S3Server;
let t: TestApp;
let dir: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "faceswap-s3-"));
  s3 = await startS3Server(BUCKET);
  t = await startTestApp(await createTestDatabase(), {
    S3_BUCKET: BUCKET,
    S3_ENDPOINT: s3.endpoint,
    S3_PREFIX: "atrium",
    DATA_DIR: path.join(dir, "data"),
    JOB_POLL_MS: "200",
  });
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await s3?.stop();
  await fs.rm(dir, { recursive: true, force: true });
});

it("uploads, renders and serves outputs through the S3 bucket", async () => {
  const { key } = await fundedAccount(t, 1000, "pro");
  const clip = await makeClip(path.join(dir, "clip.mp4"), { seconds: 1, fps: 10, width: 480, audio: true });
  const [video, face] = await Promise.all([
    uploadFile(t, key, "video", "mp4", clip),
    uploadFile(t, key, "image", "jpg", samplePhoto(2)),
  ]);
  // The upload went to the bucket under the prefix (s3rver answers unsigned reads), not to DATA_DIR.
  const stored = await fetch(`${s3.endpoint}/${BUCKET}/atrium/${video}`, { method: "HEAD" });
  expect(stored.status).toBe(200);
  expect(Number(stored.headers.get("content-length"))).toBe((await fs.stat(clip)).size);
  await expect(fs.stat(path.join(dir, "data", "blobs"))).rejects.toThrow();

  const api = t.client(key);
  const { id } = await api.faceSwap.createFaceSwap({
    assets: { videoSource: "file", videoFilePath: video, imageFilePath: face },
    startSeconds: 0,
    endSeconds: 1,
  });
  let project = (await api.videoProjects.getVideoProject({ id })).project!;
  await until(
    async () => {
      project = (await api.videoProjects.getVideoProject({ id })).project!;
      return project.status !== "queued" && project.status !== "rendering";
    },
    60_000,
    "project finished",
  );
  expect(project.status).toBe("complete");
  const url = project.downloads[0]!.url;
  expect(url.startsWith(`${s3.endpoint}/${BUCKET}/atrium/api-outputs/`)).toBe(true);
  expect(url).toContain("X-Amz-Signature=");

  const response = await fetch(url);
  expect(response.status).toBe(200);
  const output = path.join(dir, "out.mp4");
  await fs.writeFile(output, Buffer.from(await response.arrayBuffer()));
  const info = await probeMedia(output);
  expect(info).toMatchObject({ width: 480, height: 320, fps: 10, hasAudio: true });

  const part = await fetch(url, { headers: { range: "bytes=0-99" } });
  expect(part.status).toBe(206);
  expect((await part.arrayBuffer()).byteLength).toBe(100);

  await api.videoProjects.deleteVideoProject({ id });
  expect((await fetch(url)).status).toBe(404);
});
