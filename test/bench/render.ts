import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { VIDEO_ENCODING } from "../../src/faceswap/render/ffmpeg-frames.js";
import { createFaceSwapEngine, type RendererOptions } from "../../src/faceswap/render/index.js";
import type { FaceSwapMode, StyleVersion } from "../../src/platform/db/schema.js";
import { createLogger } from "../../src/platform/logger.js";
import { runFfmpeg } from "../../src/platform/media/ffmpeg.js";
import { decodeFrames } from "../../src/faceswap/render/images.js";
import type { RenderRequest } from "../../src/faceswap/renderer.js";
import { makeClip, samplePhoto } from "../support/footage.js";
import { recordingLogger } from "../support/logs.js";
import { processCpu } from "./proc-stat.js";
import { formatSummary, QualityJudge, summarise, type Summary } from "../support/quality.js";

/** The bench clip (sample1's three people), and the stairs (sample5's five). */
const CLIPS = ["three-faces", "stairs"] as const;
type ClipName = (typeof CLIPS)[number];

export interface RenderRun {
  name: string;
  clip: ClipName;
  /** The rendered file. */
  output: string;
  width: number;
  height: number;
  style: StyleVersion;
  /** all-faces, or individual-faces with one of the clip's three people mapped. */
  mode: FaceSwapMode;
  frames: number;
  fps: number;
  /** ffmpeg alone decoding, scaling and encoding the same clip to the same size and settings. */
  ffmpegFps: number;
  /** CPU of the whole process tree (workers and ffmpeg children) per frame. */
  cpuMsPerFrame: number;
  peakRssMiB: number;
  /** Where the workers' time went, ms per frame by part, as the renderer logs it (render_finished). */
  stages?: Record<string, number>;
  /** The quality judge's medians over three frames of the output (576 px runs only). */
  quality?: Summary;
  /** The same for ffmpeg's plain output at that size: the input re-encoded as its own output. */
  encoded?: Summary;
}

/** Judged frames of the 576 px outputs (each with the next, for flicker). */
const JUDGED_FRAMES = [10, 50, 90];

const SECONDS = 4;
const FPS = 25;
const SIZES = [
  { width: 576, height: 384, styles: ["v1", "v2"] as StyleVersion[] },
  { width: 1080, height: 720, styles: ["v2"] as StyleVersion[] },
];

/**
 * The renderer in this process (two workers, as in production) on a clip of sample1 (three faces)
 * panned and zoomed, at 576 and 1080 px, next to ffmpeg's plain decode+encode of the same clip; and
 * at 576 px v2 with one person of the three mapped (individual-faces: the other two are identified
 * as nobody's and left alone). Then sample5's stairs at 576 px v2, printed beside them and held to no
 * target: five smaller faces in warm light, hair beside their cheeks, footage the renderer was not tuned on.
 */
export async function benchRender(): Promise<RenderRun[]> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "bench-render-"));
  // The renderer's own log line for each render says where its workers' time went.
  const { logger, logs } = recordingLogger("info");
  const options: RendererOptions = { workers: 2, logger };
  const renderer = createFaceSwapEngine(options);
  try {
    const clip = await makeClip(path.join(dir, "three-faces.mp4"), { seconds: SECONDS, fps: FPS, width: 1080, audio: true });
    const crops = await renderer.detect({
      input: samplePhoto(3), still: true, confidence: 0.5, outputDirectory: dir, signal: new AbortController().signal,
    });
    const face = crops.find((crop) => crop.index === 1)!.png;
    const base = { video: clip, startSeconds: 0, fps: FPS, hasAudio: true, mode: "all-faces" as const, face, mappings: [] };
    // Workers start and load their models on first use; that is not part of a render's speed.
    await renderer.render({
      ...base, endSeconds: 0.4, width: 576, height: 384, style: "v1", output: path.join(dir, "warmup.mp4"), signal: new AbortController().signal,
    });
    const people = await renderer.detect({ input: clip, still: false, confidence: 0.5, outputDirectory: path.join(dir, "people"), signal: new AbortController().signal });
    const mapping = { originalFace: people.sort((a, b) => a.index - b.index)[1]!.png, newFace: face };
    const runs: RenderRun[] = [];
    const timed = async (name: string, request: RenderRequest, ffmpegFps: number, clipName: ClipName = "three-faces"): Promise<void> => {
      const memory = sampleRss();
      const cpuBefore = treeCpuMs();
      const started = performance.now();
      const { frames } = await renderer.render(request);
      const seconds = (performance.now() - started) / 1000;
      const cpuMsPerFrame = (treeCpuMs() - cpuBefore) / frames;
      const stages = logs.findLast((entry) => entry.event === "render_finished")?.worker_ms_per_frame as Record<string, number> | undefined;
      runs.push({
        name, clip: clipName, output: request.output, width: request.width, height: request.height, style: request.style, mode: request.mode, frames, fps: frames / seconds, ffmpegFps, cpuMsPerFrame,
        peakRssMiB: memory.stop(), ...(stages && { stages }),
      });
    };
    for (const { width, height, styles } of SIZES) {
      const ffmpegFps = await plainEncode(clip, width, height, path.join(dir, `plain-${width}.mp4`));
      for (const style of styles) {
        const request = { ...base, endSeconds: SECONDS, width, height, style, output: path.join(dir, `out-${width}-${style}.mp4`), signal: new AbortController().signal };
        await timed(`${width}x${height} ${style}`, request, ffmpegFps);
      }
      if (width === 576) {
        const request = {
          ...base, mode: "individual-faces" as const, face: undefined, mappings: [mapping], endSeconds: SECONDS, width, height, style: "v2" as const,
          output: path.join(dir, "out-576-v2-one.mp4"), signal: new AbortController().signal,
        };
        await timed(`${width}x${height} v2 one of 3`, request, ffmpegFps);
      }
    }
    const stairs = await makeClip(path.join(dir, "stairs.mp4"), { seconds: SECONDS, fps: FPS, width: 1080, photo: samplePhoto(5) });
    const stairsFfmpegFps = await plainEncode(stairs, 576, 384, path.join(dir, "plain-576-stairs.mp4"));
    await timed("576x384 v2 stairs", {
      ...base, video: stairs, hasAudio: false, endSeconds: SECONDS, width: 576, height: 384, style: "v2",
      output: path.join(dir, "out-576-v2-stairs.mp4"), signal: new AbortController().signal,
    }, stairsFfmpegFps, "stairs");
    await judgeRuns(runs, {
      "three-faces": { clip, plain: path.join(dir, "plain-576.mp4") },
      stairs: { clip: stairs, plain: path.join(dir, "plain-576-stairs.mp4") },
    }, face);
    return runs;
  } finally {
    await renderer.close();
    await fs.rm(dir, { recursive: true, force: true });
  }
}

/** ffmpeg alone decoding, scaling and encoding `clip` as a render's output is encoded; returns its frames per second. */
async function plainEncode(clip: string, width: number, height: number, output: string): Promise<number> {
  const started = performance.now();
  await runFfmpeg([
    "-y", "-loglevel", "error", "-i", clip, "-vf", `scale=${width}:${height}`, ...VIDEO_ENCODING, "-c:a", "aac", "-movflags", "+faststart", output,
  ]);
  return (SECONDS * FPS) / ((performance.now() - started) / 1000);
}

/**
 * Scores the 576 px all-faces outputs with the quality judge against their own clip, after the timed
 * runs (it is not part of their speed), each beside that clip re-encoded by ffmpeg alone.
 */
async function judgeRuns(runs: RenderRun[], clips: Record<ClipName, { clip: string; plain: string }>, face: string): Promise<void> {
  const judge = await QualityJudge.start(createLogger("warn"));
  try {
    await judge.setNewFace((await decodeFrames(face, { maxLongSide: 1024, maxFrames: 1 })).frames[0]!);
    const frames = async (file: string) => (await decodeFrames(file, { maxLongSide: 576, maxFrames: SECONDS * FPS })).frames;
    for (const name of CLIPS) {
      const { clip, plain } = clips[name];
      const input = await frames(clip);
      const encoded = summarise(await judge.judge(input, await frames(plain), JUDGED_FRAMES));
      for (const run of runs.filter((r) => r.clip === name && r.width === 576 && r.mode === "all-faces")) {
        run.quality = summarise(await judge.judge(input, await frames(run.output), JUDGED_FRAMES));
        run.encoded = encoded;
      }
    }
  } finally {
    await judge.close();
  }
}

export function printRenderRuns(runs: RenderRun[]): void {
  console.log(
    ["run".padEnd(20), "frames".padStart(7), "fps".padStart(7), "ffmpeg fps".padStart(11), "ratio".padStart(7),
      "CPU ms/frame".padStart(13), "fps/2 cores".padStart(12), "peak RSS MiB".padStart(13)].join(" "),
  );
  for (const r of runs) {
    console.log(
      [
        r.name.padEnd(20),
        String(r.frames).padStart(7),
        r.fps.toFixed(1).padStart(7),
        r.ffmpegFps.toFixed(1).padStart(11),
        (r.fps / r.ffmpegFps).toFixed(2).padStart(7),
        r.cpuMsPerFrame.toFixed(0).padStart(13),
        // What the CPU cost per frame allows on two otherwise idle cores.
        (2000 / r.cpuMsPerFrame).toFixed(1).padStart(12),
        r.peakRssMiB.toFixed(0).padStart(13),
      ].join(" "),
    );
  }
  for (const r of runs) {
    if (!r.stages) continue;
    const parts = Object.entries(r.stages).map(([part, ms]) => `${part} ${ms.toFixed(1)}`).join(", ");
    console.log(`workers' ms per frame ${r.name}: ${parts}`);
  }
  for (const clip of CLIPS) {
    const judged = runs.filter((r) => r.clip === clip && r.quality);
    const encoded = judged[0]?.encoded;
    if (encoded) console.log(`quality ffmpeg alone, 576 px, ${clip} (the input re-encoded): ${formatSummary(encoded)}`);
    for (const r of judged) console.log(`quality ${r.name}: ${formatSummary(r.quality!)}`);
  }
  console.log(`load average while measuring: ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} (other processes share the cores)`);
}

/** Peak RSS of this process (main thread and workers share it) while a run lasts. */
function sampleRss(): { stop(): number } {
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(peak, process.memoryUsage().rss) / 2 ** 20;
    },
  };
}

/** CPU time of this process (its render workers are threads) and its finished children (the ffmpeg processes). */
function treeCpuMs(): number {
  const cpu = processCpu("self")!;
  return cpu.ownMs + cpu.reapedChildrenMs;
}
