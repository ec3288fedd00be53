import { spawn } from "node:child_process";
import fs from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  downloadProjectOutputs,
  FaceSwapInputError,
  FaceSwapJobError,
  generateFaceSwap,
  TransferError,
  type AtriumClient,
  type GenerateProgress,
} from "../src/client/index.js";
import { probeMedia, runFfmpeg } from "../src/platform/media/ffmpeg.js";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { makeClip, samplePhoto } from "./support/footage.js";

const require = createRequire(import.meta.url);
const MagicHour = (require("magic-hour") as { default: typeof import("magic-hour").default }).default;
const CLI = path.resolve(import.meta.dirname, "../src/client/cli.ts");

let t: TestApp;
/** A replica that never renders: its jobs stay queued until canceled. */
let idle: TestApp;
let dir: string;
let video: string;
const face = samplePhoto(2);

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "faceswap-client-"));
  [t, idle, video] = await Promise.all([
    createTestDatabase().then((url) => startTestApp(url, { JOB_POLL_MS: "200" })),
    createTestDatabase().then((url) => startTestApp(url, { JOB_POLL_MS: "200", RENDER_CONCURRENCY: "0" })),
    makeClip(path.join(dir, "clip.mp4"), { seconds: 1.5, fps: 20, width: 320, audio: true }),
  ]);
});

afterAll(async () => {
  await Promise.all([t?.stop(), idle?.stop()]);
  await fs.rm(dir, { recursive: true, force: true });
});

async function funded(app: TestApp): Promise<{ key: string; client: AtriumClient }> {
  const { accountId, key } = await createAccountWithKey(app, ["faceswap"]);
  await app.admin.admin.grantCredits({ accountId, amount: 1000, reason: "client test" });
  return { key, client: app.client(key) };
}

function uploadsLogged(app: TestApp): number {
  return app.logs.filter((line) => line.event === "blob_uploaded").length;
}

/** Each stage once, in the order first seen. */
function stages(events: GenerateProgress[]): string[] {
  return events.map((e) => e.stage).filter((stage, i, all) => stage !== all[i - 1]);
}

describe("generate()", () => {
  // The first render also loads the face models, hence the longer timeout.
  it("uploads local files, waits for the render and downloads the mp4, reporting progress in order", async () => {
    const { client } = await funded(t);
    const events: GenerateProgress[] = [];
    const out = path.join(dir, "e2e", "nested");
    const { project, downloadedPaths } = await client.faceSwap.generate(
      { startSeconds: 0.5, endSeconds: 1.5, assets: { videoFilePath: video, imageFilePath: face, faceSwapMode: "all-faces" } },
      { downloadDirectory: out, pollIntervalMs: 50, onProgress: (e) => events.push(e) },
    );

    expect(project.status).toBe("complete");
    expect(project.framesRendered).toBe(20);
    expect(project.creditsCharged).toBe(20);
    expect(downloadedPaths).toEqual([path.join(out, `${project.id}.mp4`)]);
    const info = await probeMedia(downloadedPaths[0]!);
    expect(info).toMatchObject({ width: project.width, height: project.height, fps: 20, hasAudio: true });
    expect(info.durationSeconds).toBeGreaterThan(0.9);
    expect(info.durationSeconds).toBeLessThan(1.2);
    expect(await fs.readdir(out)).toEqual([`${project.id}.mp4`]);

    expect(stages(events).join(",")).toMatch(/^upload,(queued,)?(rendering,)?download,complete$/);
    expect(events.some((e) => e.stage === "queued" || e.stage === "rendering")).toBe(true);
    for (const file of [video, face]) {
      const uploads = events.filter((e) => e.stage === "upload" && e.file === file);
      const size = (await fs.stat(file)).size;
      expect(uploads[0]).toMatchObject({ bytes: 0, totalBytes: size });
      expect(uploads.at(-1)).toMatchObject({ bytes: size, totalBytes: size });
    }
    const downloads = events.filter((e) => e.stage === "download");
    const size = (await fs.stat(downloadedPaths[0]!)).size;
    expect(downloads.at(-1)).toMatchObject({ file: downloadedPaths[0], bytes: size, totalBytes: size });
    expect(events.at(-1)).toMatchObject({ stage: "complete", project: { id: project.id, status: "complete" } });
  }, 60_000);

  it("passes a file_path through without uploading it again, and returns at once without waiting", async () => {
    const { client } = await funded(idle);
    const { items } = await client.files.createUploadUrls({ items: [{ type: "video", extension: "mp4" }] });
    const put = await fetch(items[0]!.uploadUrl, { method: "PUT", body: await fs.readFile(video) });
    expect(put.status).toBe(200);
    const before = uploadsLogged(idle);

    const events: GenerateProgress[] = [];
    const out = path.join(dir, "never-created");
    const { project, downloadedPaths } = await generateFaceSwap(
      client,
      { startSeconds: 0, endSeconds: 1, assets: { videoSource: "file", videoFilePath: items[0]!.filePath, imageFilePath: face } },
      { waitForCompletion: false, downloadDirectory: out, onProgress: (e) => events.push(e) },
    );

    expect(project.status).toBe("queued");
    expect(downloadedPaths).toEqual([]);
    await expect(fs.stat(out)).rejects.toThrow(/ENOENT/);
    expect(events.map((e) => e.stage === "upload" && e.file)).toEqual(events.map(() => face));
    expect(uploadsLogged(idle) - before).toBe(1);
  });

  it("refuses a missing local file before uploading anything", async () => {
    const { client } = await funded(t);
    const before = uploadsLogged(t);
    const events: GenerateProgress[] = [];
    const missing = path.join(dir, "nobody.jpg");
    const error = await generateFaceSwap(
      client,
      { startSeconds: 0, endSeconds: 1, assets: { videoFilePath: video, faceSwapMode: "individual-faces", faceMappings: [{ originalFace: face, newFace: missing }] } },
      { onProgress: (e) => events.push(e) },
    ).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(FaceSwapInputError);
    expect(error).toMatchObject({ field: "assets.face_mappings[0].new_face", file: missing, reason: "does not exist" });
    expect(events).toEqual([]);
    expect(uploadsLogged(t)).toBe(before);
  });

  it("throws FaceSwapJobError with the project's error code when the render fails", async () => {
    const { client } = await funded(t);
    // A picture without a face: the upload is a valid image, the render refuses it as the new face.
    const faceless = path.join(dir, "no-face.png");
    await runFfmpeg(["-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240", "-frames:v", "1", faceless]);
    const error = await generateFaceSwap(client, { startSeconds: 0, endSeconds: 0.5, assets: { videoFilePath: video, imageFilePath: faceless } }, {
      downloadDirectory: dir,
      pollIntervalMs: 50,
    }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(FaceSwapJobError);
    const jobError = error as FaceSwapJobError;
    expect(jobError.code).toBe("no_face_in_source");
    expect(jobError.project).toMatchObject({ status: "error", creditsCharged: 0, error: { code: "no_face_in_source" } });
  });

  it("throws a canceled FaceSwapJobError when the project is canceled elsewhere", async () => {
    const { client, key } = await funded(idle);
    const other = idle.client(key);
    const error = await generateFaceSwap(client, { startSeconds: 0, endSeconds: 1, assets: { videoFilePath: video, imageFilePath: face } }, {
      pollIntervalMs: 50,
      onProgress: (e) => {
        if (e.stage === "queued") void other.videoProjects.cancelVideoProject({ id: e.projectId });
      },
    }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(FaceSwapJobError);
    expect(error).toMatchObject({ code: "canceled", project: { status: "canceled", creditsCharged: 0 } });
  });

  it("cancels the project when the caller aborts", async () => {
    const { client } = await funded(idle);
    const controller = new AbortController();
    let projectId = "";
    const reason = new Error("no longer wanted");
    const error = await generateFaceSwap(client, { startSeconds: 0, endSeconds: 1, assets: { videoFilePath: video, imageFilePath: face } }, {
      signal: controller.signal,
      onProgress: (e) => {
        if (e.stage !== "queued") return;
        projectId = e.projectId;
        controller.abort(reason);
      },
    }).catch((e: unknown) => e);

    expect(error).toBe(reason);
    const { project } = await client.videoProjects.getVideoProject({ id: projectId });
    expect(project!.status).toBe("canceled");
  });

  it("stops uploading when the caller aborts, creating nothing", async () => {
    const { client } = await funded(idle);
    const controller = new AbortController();
    const reason = new Error("changed my mind");
    const error = await generateFaceSwap(client, { startSeconds: 0, endSeconds: 1, assets: { videoFilePath: video, imageFilePath: face } }, {
      signal: controller.signal,
      onProgress: (e) => {
        if (e.stage === "upload") controller.abort(reason);
      },
    }).catch((e: unknown) => e);

    expect(error).toBe(reason);
    expect((await client.videoProjects.listVideoProjects({})).projects).toEqual([]);
  });

  it("throws when an output cannot be downloaded, leaving no partial file", async () => {
    const { client } = await funded(t);
    const { project } = await generateFaceSwap(client, { startSeconds: 0, endSeconds: 0.5, assets: { videoFilePath: video, imageFilePath: face } }, { downloadOutputs: false });
    const out = path.join(dir, "failed-downloads");

    const url = new URL(project.downloads[0]!.url);
    url.searchParams.set("signature", "0".repeat(64));
    const forged = { ...project, downloads: [{ ...project.downloads[0]!, url: url.toString() }] };
    await expect(downloadProjectOutputs(forged, out)).rejects.toMatchObject({ name: "TransferError", direction: "download", status: 403 });

    await client.videoProjects.deleteVideoProject({ id: project.id });
    const error = await downloadProjectOutputs(project, out).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransferError);
    expect(error).toMatchObject({ status: 404, message: expect.stringContaining("no longer exists") });
    expect(await fs.readdir(out)).toEqual([]);
  });
});

describe("faceswap CLI", () => {
  function run(args: string[], token?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const env = { ...process.env, ATRIUM_ADDRESS: t.grpcAddress, ATRIUM_TOKEN: token ?? "" };
      const child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });
  }

  it("generates, downloads and prints the result as JSON, with JSON progress lines off a terminal", async () => {
    const { key } = await funded(t);
    const out = path.join(dir, "cli-out");
    const result = await run(["generate", "--video", video, "--face", face, "--start", "0", "--end", "0.5", "--style", "v1", "--name", "cli", "--out", out], key);

    expect(result.code, result.stderr).toBe(0);
    const printed = JSON.parse(result.stdout) as { id: string; status: string; name: string; creditsCharged: number; downloadedPaths: string[] };
    expect(printed).toMatchObject({ status: "complete", name: "cli", creditsCharged: 10, downloadedPaths: [path.join(out, `${printed.id}.mp4`)] });
    expect((await fs.stat(printed.downloadedPaths[0]!)).size).toBeGreaterThan(0);
    const lines = result.stderr.trim().split("\n").map((line) => JSON.parse(line) as { event: string; stage: string });
    expect(lines.every((line) => line.event === "progress")).toBe(true);
    expect(lines[0]!.stage).toBe("upload");
    expect(lines.at(-1)!.stage).toBe("complete");
  });

  it("exits 2 naming the flag on usage errors", async () => {
    const missingFlag = await run(["generate", "--face", face, "--end", "1"], "unused");
    expect(missingFlag.code).toBe(2);
    expect(missingFlag.stderr).toContain("--video is required");

    const { key } = await funded(t);
    const missingFile = await run(["generate", "--video", path.join(dir, "nope.mp4"), "--face", face, "--end", "1"], key);
    expect(missingFile.code).toBe(2);
    expect(missingFile.stderr).toMatch(/--video: .*nope\.mp4 does not exist/);

    // Found before any upload: a range that ends before it starts, an --out no one can write to.
    const backwards = await run(["generate", "--video", video, "--face", face, "--start", "5", "--end", "2"], key);
    expect(backwards.code).toBe(2);
    expect(backwards.stderr).toContain("--end must be greater than --start (5), got 2");
    expect(backwards.stderr).not.toContain("upload");
    const blocked = path.join(dir, "a-file");
    await fs.writeFile(blocked, "");
    const badOut = await run(["generate", "--video", video, "--face", face, "--end", "1", "--out", path.join(blocked, "out")], key);
    expect(badOut.code).toBe(2);
    expect(badOut.stderr).toContain("--out: ");
    // A file the video upload does not take is named by its flag, not the server's items[0].
    const imageAsVideo = await run(["generate", "--video", face, "--face", face, "--end", "1"], key);
    expect(imageAsVideo.code).toBe(2);
    expect(imageAsVideo.stderr).toMatch(/--video: .* cannot be uploaded as a video: its extension must be one of/);
  });
});

describe("the magic-hour SDK against this server", () => {
  it("runs faceSwap.generate end to end over HTTP", async () => {
    const { key } = await funded(t);
    const out = path.join(dir, "sdk-out");
    const sdk = new MagicHour({ token: key, baseUrl: t.httpUrl });
    const result = await sdk.v1.faceSwap.generate(
      { startSeconds: 0, endSeconds: 0.5, assets: { videoSource: "file", faceSwapMode: "all-faces", videoFilePath: video, imageFilePath: face } },
      { waitForCompletion: true, downloadOutputs: true, downloadDirectory: out },
    );

    expect(result.status).toBe("complete");
    expect(result.downloadedPaths).toEqual([path.join(out, `${result.id}.mp4`)]);
    const info = await probeMedia(result.downloadedPaths![0]!);
    expect(info.durationSeconds).toBeGreaterThan(0.4);
  });
});
