import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import type { Writable } from "node:stream";
import { ffmpegPath } from "../../platform/media/ffmpeg.js";
import { expectedFrames } from "../rules.js";

/** A range of a video as raw rgb24 frames of one size and rate. */
export interface FrameFormat {
  video: string;
  startSeconds: number;
  endSeconds: number;
  width: number;
  height: number;
  fps: number;
}

/** An ffmpeg child whose exit status and stderr tail are kept for the error message. */
export class FfmpegProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  private stderr = "";

  constructor(
    private readonly args: string[],
    stdin: "pipe" | "ignore",
    stdout: "pipe" | "ignore",
  ) {
    this.child = spawn(ffmpegPath, args, { stdio: [stdin, stdout, "pipe"] });
    this.child.stderr!.setEncoding("utf8");
    this.child.stderr!.on("data", (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-16 * 1024);
    });
    this.exited = new Promise((resolve) => {
      this.child.on("error", (err) => {
        this.stderr += `\n${err.message}`;
        resolve(-1);
      });
      this.child.on("close", (code) => resolve(code));
    });
  }

  /**
   * The last lines ffmpeg wrote to stderr, for an error message (which reaches the job's owner): the
   * files it was given are named by their file names, not where this server keeps them.
   */
  tail(): string {
    let text = this.stderr.trim().split("\n").slice(-3).join(" | ");
    for (const arg of this.args) if (path.isAbsolute(arg)) text = text.replaceAll(arg, path.basename(arg));
    return text;
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}

/** Seconds as ffmpeg reads them: fixed-point to the microsecond (it refuses `1e-7`, which String() writes). */
export function ffmpegSeconds(seconds: number): string {
  return seconds.toFixed(6);
}

/**
 * Decodes the range to rgb24 on stdout. `-ss` before `-i` seeks by keyframe and then decodes
 * accurately up to the start, which is far faster than decoding from the beginning. The range starts
 * with the frame showing at its start, not the first frame after it: a start inside the last frame's
 * time found no frame at all. Frames are scaled bicubically (ffmpeg's default): bilinear left every
 * downscaled render soft, faces and all (a 1080 px clip scaled to 576 px and encoded kept 0.43 of its
 * faces' Laplacian variance, against 0.65 bicubically).
 */
export function startDecoder(format: FrameFormat): FfmpegProcess {
  const from = Math.floor(format.startSeconds * format.fps + 1e-6) / format.fps;
  const duration = Math.max(format.endSeconds - from, 1 / format.fps);
  return new FfmpegProcess(
    [
      "-hide_banner", "-nostdin", "-loglevel", "error",
      "-ss", ffmpegSeconds(from), "-t", ffmpegSeconds(duration), "-i", format.video,
      "-an", "-sn", "-dn",
      "-vf", `scale=${format.width}:${format.height}:flags=bicubic,fps=${format.fps}`,
      "-frames:v", String(expectedFrames(format.startSeconds, format.endSeconds, format.fps)),
      "-pix_fmt", "rgb24", "-f", "rawvideo", "pipe:1",
    ],
    "ignore",
    "pipe",
  );
}

/**
 * How a render's picture is encoded. At x264's default quality (CRF 23) the encoder took more of the
 * new faces' fine detail (a resampled photo's low-contrast texture) than of the footage's, which had
 * survived an encode already: the sofa clip's new faces kept 0.67 of the footage's Laplacian variance,
 * the footage encoded again 0.81. At 18, about visually lossless, 0.80 and 0.85, in twice the bytes.
 */
export const VIDEO_ENCODING = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p"] as const;

/** Encodes rgb24 frames from stdin to H.264 MP4, with the range's audio from the source when asked. */
export function startEncoder(format: FrameFormat, output: string, withAudio: boolean): FfmpegProcess {
  const duration = format.endSeconds - format.startSeconds;
  const args = [
    "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
    "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", `${format.width}x${format.height}`, "-r", String(format.fps), "-i", "pipe:0",
  ];
  // The range's audio is bounded by -t on its input. No -shortest: where the source's sound stops
  // before its picture, ffmpeg ended the output (and stopped reading its stdin) short of the frames
  // still to come, and the render failed on a broken pipe.
  if (withAudio) args.push("-ss", ffmpegSeconds(format.startSeconds), "-t", ffmpegSeconds(duration), "-i", format.video);
  args.push("-map", "0:v:0");
  if (withAudio) args.push("-map", "1:a:0?", "-c:a", "aac");
  args.push(...VIDEO_ENCODING, "-movflags", "+faststart", output);
  const encoder = new FfmpegProcess(args, "pipe", "ignore");
  // A dead encoder shows as its exit status; EPIPE on its stdin would otherwise be an unhandled error.
  encoder.child.stdin!.on("error", () => {});
  return encoder;
}

/** Reads whole frames of `frameBytes` from a decoder's stdout, one at a time (the stream pauses between). */
export async function* readFrames(stdout: NodeJS.ReadableStream, frameBytes: number): AsyncGenerator<Buffer> {
  // Each frame owns its memory, so it can be transferred to a worker without a copy.
  let frame = Buffer.allocUnsafeSlow(frameBytes);
  let filled = 0;
  for await (const data of stdout) {
    const chunk = data as Buffer;
    let offset = 0;
    while (offset < chunk.length) {
      const n = Math.min(frameBytes - filled, chunk.length - offset);
      chunk.copy(frame, filled, offset, offset + n);
      filled += n;
      offset += n;
      if (filled === frameBytes) {
        yield frame;
        frame = Buffer.allocUnsafeSlow(frameBytes);
        filled = 0;
      }
    }
  }
}

/** Writes one frame, waiting for the encoder to drain when its pipe is full. */
export async function writeFrame(stdin: Writable, frame: Buffer, encoderExited: Promise<unknown>): Promise<boolean> {
  if (stdin.write(frame)) return true;
  // A pipe broken while waiting (the encoder gone) is the encoder's failure, told by its exit status.
  const drained = once(stdin, "drain").then(() => true, () => false);
  return Promise.race([drained, encoderExited.then(() => false)]);
}
