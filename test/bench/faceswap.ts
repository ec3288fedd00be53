import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient, type AtriumClient } from "../../src/client/index.js";
import { VIDEO_ENCODING } from "../../src/faceswap/render/ffmpeg-frames.js";
import { runFfmpeg } from "../../src/platform/media/ffmpeg.js";
import { makeClip, samplePhoto } from "../support/footage.js";
import { quantile, type LoadResult } from "./load.js";
import type { ServerProcess } from "./server-process.js";

const CONCURRENT_CREATES = 200;
const CLIP_SECONDS = 5;

export interface FaceSwapBench {
  baseline: LoadResult;
  creates: LoadResult;
  /** Create to complete of one 5 s clip through the queue, and its phases, in ms. */
  job: { queueToCompleteMs: number; waitMs: number; renderMs: number; frames: number; width: number; height: number };
  /** ffmpeg decoding and encoding the same clip at the same size, in ms (the baseline of the job). */
  ffmpegMs: number;
}

/**
 * 200 face swap jobs created at once (each probes its clip and reserves credits in a transaction),
 * next to 200 concurrent GetAccount calls; then one 5 s clip from create to complete, next to
 * ffmpeg's plain decode + encode of that clip at the same output size and x264 preset, in the same run.
 */
export async function benchFaceSwap(server: ServerProcess, adminToken: string): Promise<FaceSwapBench> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "atrium-bench-faceswap-"));
  const admin = createClient({ address: server.grpcAddress, token: adminToken });
  let client: AtriumClient | undefined;
  try {
    const { account } = await admin.admin.createAccount({ name: "faceswap bench", groupIds: [] });
    const accountId = account!.id;
    const { key } = await admin.admin.createApiKey({ accountId, name: "bench", scopes: ["faceswap"] });
    await admin.admin.grantCredits({ accountId, amount: 1_000_000_000 });
    await admin.admin.setAccountPlan({ accountId, plan: "pro" });
    client = createClient({ address: server.grpcAddress, token: key });
    const api = client;

    const clip = await makeClip(path.join(dir, "clip.mp4"), { seconds: CLIP_SECONDS, width: 1280, audio: true, photo: samplePhoto(1) });
    const [video, face] = await Promise.all([upload(api, "video", clip), upload(api, "image", samplePhoto(2))]);
    const request = {
      assets: { videoSource: "file", videoFilePath: video, imageFilePath: face },
      startSeconds: 0,
      endSeconds: CLIP_SECONDS,
    };

    const baseline = await burst("GetAccount x200 at once", () => api.account.getAccount({}));
    const ids: string[] = [];
    const creates = await burst(`CreateFaceSwap x${CONCURRENT_CREATES} at once`, async () => {
      ids.push((await api.faceSwap.createFaceSwap(request)).id);
    });
    // Cancelled at once so the queue is empty for the latency run (and the refunds run too).
    await Promise.all(ids.map((id) => api.videoProjects.cancelVideoProject({ id })));

    const created = await api.faceSwap.createFaceSwap(request);
    let project;
    for (;;) {
      project = (await api.videoProjects.getVideoProject({ id: created.id })).project!;
      if (project.status !== "queued" && project.status !== "rendering") break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    if (project.status !== "complete") throw new Error(`bench job ended ${project.status}: ${project.error?.message}`);
    const createdAt = project.createdAt!.getTime();
    const job = {
      queueToCompleteMs: project.finishedAt!.getTime() - createdAt,
      waitMs: project.startedAt!.getTime() - createdAt,
      renderMs: project.finishedAt!.getTime() - project.startedAt!.getTime(),
      frames: project.framesRendered,
      width: project.width,
      height: project.height,
    };

    const started = performance.now();
    await runFfmpeg([
      "-y", "-loglevel", "error", "-ss", "0", "-t", String(CLIP_SECONDS), "-i", clip,
      "-vf", `scale=${job.width}:${job.height}`, ...VIDEO_ENCODING, "-c:a", "aac",
      "-movflags", "+faststart", path.join(dir, "ffmpeg.mp4"),
    ]);
    return { baseline, creates, job, ffmpegMs: performance.now() - started };
  } finally {
    client?.close();
    admin.close();
    await fs.rm(dir, { recursive: true, force: true });
  }
}

async function upload(client: AtriumClient, type: "video" | "image", file: string): Promise<string> {
  const { items } = await client.files.createUploadUrls({ items: [{ type, extension: path.extname(file).slice(1) }] });
  const response = await fetch(items[0]!.uploadUrl, { method: "PUT", body: await fs.readFile(file) });
  if (!response.ok) throw new Error(`upload failed with ${response.status}`);
  return items[0]!.filePath;
}

/** `CONCURRENT_CREATES` calls started together; latency of each, throughput of the whole burst. */
async function burst(name: string, call: () => Promise<unknown>): Promise<LoadResult> {
  const latencies: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENT_CREATES }, async () => {
      const t0 = performance.now();
      try {
        await call();
        latencies.push(performance.now() - t0);
      } catch (error) {
        errors++;
        firstError ??= String(error);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    name,
    requests: latencies.length,
    errors,
    firstError,
    seconds,
    perSecond: latencies.length / seconds,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
  };
}
