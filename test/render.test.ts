import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRenderer } from "../src/faceswap/render/index.js";
import { RenderError, type Renderer, type RenderRequest } from "../src/faceswap/renderer.js";
import { createLogger } from "../src/platform/logger.js";
import { probeMedia } from "../src/platform/media/ffmpeg.js";
import { makeClip, makePatternClip, samplePhoto } from "./support/footage.js";

let dir: string;
let renderer: Renderer;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "render-test-"));
  renderer = createRenderer({ workers: 2, logger: createLogger("silent") });
});

afterAll(async () => {
  await renderer.close();
  await fs.rm(dir, { recursive: true, force: true });
});

function request(overrides: Partial<RenderRequest>): RenderRequest {
  return {
    video: "",
    startSeconds: 0,
    endSeconds: 1,
    width: 320,
    height: 240,
    fps: 25,
    hasAudio: false,
    mode: "all-faces",
    face: samplePhoto(2),
    mappings: [],
    style: "v1",
    output: path.join(dir, `out-${Math.random().toString(36).slice(2)}.mp4`),
    signal: new AbortController().signal,
    ...overrides,
  };
}

describe("render pipeline", () => {
  it("writes the requested range, size and rate, with the source audio", async () => {
    const video = await makeClip(path.join(dir, "audio.mp4"), { seconds: 3, fps: 25, width: 320, audio: true });
    const progress: Array<[number, number]> = [];
    const req = request({
      video, startSeconds: 1, endSeconds: 2.6, width: 240, height: 160, fps: 20, hasAudio: true,
      onProgress: (done, expected) => progress.push([done, expected]),
    });
    const result = await renderer.render(req);
    expect(result.frames).toBe(32);
    const info = await probeMedia(req.output);
    expect(info).toMatchObject({ width: 240, height: 160, fps: 20, hasAudio: true, still: false });
    expect(info.durationSeconds).toBeGreaterThan(1.5);
    expect(info.durationSeconds).toBeLessThan(1.7);
    expect(progress.at(-1)).toEqual([32, 32]);
  });

  it("fails with decode_failed on an input that is not a video", async () => {
    const bogus = path.join(dir, "bogus.mp4");
    await fs.writeFile(bogus, "not a video");
    await expect(renderer.render(request({ video: bogus }))).rejects.toMatchObject({
      name: "RenderError", code: "decode_failed",
    } satisfies Partial<RenderError>);
  });

  it("stops within a second when cancelled", async () => {
    const video = await makePatternClip(path.join(dir, "long.mp4"), 20, "640x480");
    const controller = new AbortController();
    let abortedAt = 0;
    const rendering = renderer.render(request({
      video, endSeconds: 20, width: 640, height: 480, signal: controller.signal,
      onProgress: (done) => {
        if (done === 0 || controller.signal.aborted) return;
        abortedAt = performance.now();
        controller.abort();
      },
    }));
    await expect(rendering).rejects.toMatchObject({ name: "AbortError" });
    expect(abortedAt).toBeGreaterThan(0);
    expect(performance.now() - abortedAt).toBeLessThan(1000);
  });
});
