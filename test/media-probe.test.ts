import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { outputSize, probeMedia, runFfmpeg } from "../src/platform/media/ffmpeg.js";

let dir: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "probe-test-"));
});
afterAll(async () => {
  await fs.rm(dir, { recursive: true, force: true });
});

/** A synthetic clip (ffmpeg's test pattern) written with `args`. */
async function pattern(name: string, args: string[]): Promise<string> {
  const file = path.join(dir, name);
  await runFfmpeg(["-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25:duration=1", ...args, file]);
  return file;
}

describe("probeMedia", () => {
  it("reports an anamorphic clip's size as shown, its pixels made square", async () => {
    const wide = await pattern("anamorphic.mp4", ["-vf", "setsar=2/1", "-c:v", "libx264", "-pix_fmt", "yuv420p"]);
    expect(await probeMedia(wide)).toMatchObject({ width: 640, height: 240, still: false });
  });

  it("reads an animated GIF's length from its frames (its container gives none)", async () => {
    const gif = await pattern("moving.gif", []);
    const info = await probeMedia(gif);
    expect(info.still).toBe(false);
    expect(info.fps).toBeGreaterThan(0);
    expect(info.durationSeconds).toBeCloseTo(1, 1);
  });
});

describe("outputSize", () => {
  it.each([
    [4096, 2730, 1080, { width: 1080, height: 720 }],
    [1080, 720, 576, { width: 576, height: 384 }],
    [1081, 720, 576, { width: 576, height: 384 }],
    [577, 385, 4096, { width: 576, height: 384 }],
    [1920, 1080, 576, { width: 576, height: 324 }],
  ])("%ix%i capped at %i is the nearest even size, never above the source's: %o", (width, height, cap, expected) => {
    expect(outputSize(width, height, cap)).toEqual(expected);
  });
});
