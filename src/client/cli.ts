#!/usr/bin/env node
import { constants as fsConstants } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { ApiError, Code, createClient, FaceSwapInputError, FaceSwapJobError, type AtriumClient, type VideoProject } from "./index.js";
import type { GenerateProgress } from "./generate.js";

const HELP = `faceswap: face swap videos with the Atrium API

Usage:
  faceswap generate --video <file|file_path|url> (--face <image> | --map <original>=<new> ...) --end <s> [options]
  faceswap status <project id>
  faceswap cancel <project id>

generate options:
  --video <path>         the source video: a local file, an uploaded file_path or an http(s) URL
  --face <path>          the face to swap in for every face (all-faces)
  --map <orig>=<new>     swap one face of the video for another (repeatable; individual-faces)
  --start <seconds>      start of the clip, default 0
  --end <seconds>        end of the clip (required)
  --out <directory>      where outputs are downloaded, default the current directory
  --style <v1|v2|default>
  --name <name>          the project's name
  --no-wait              return once the job is queued
  --no-download          wait, but do not download the outputs

Common options:
  --address <host:port>  the gRPC server, default $ATRIUM_ADDRESS or localhost:50051
  --token <key>          an API key with the faceswap scope, default $ATRIUM_TOKEN
  -h, --help

Progress goes to stderr (a bar on a terminal, one JSON line per event otherwise); the result is
printed as JSON on stdout. Exit codes: 0 done, 1 the job failed or was canceled (or another error),
2 usage error, 130 interrupted (the project is canceled).
`;

const COMMON = {
  address: { type: "string" },
  token: { type: "string" },
  help: { type: "boolean", short: "h" },
} satisfies ParseArgsOptionsConfig;

const GENERATE = {
  ...COMMON,
  video: { type: "string" },
  face: { type: "string" },
  map: { type: "string", multiple: true },
  start: { type: "string" },
  end: { type: "string" },
  out: { type: "string" },
  style: { type: "string" },
  name: { type: "string" },
  wait: { type: "boolean", default: true },
  download: { type: "boolean", default: true },
} satisfies ParseArgsOptionsConfig;

/** Which flag a request field came from, to name it in errors. */
const FLAGS: [RegExp, string][] = [
  [/^assets\.(video_file_path|video_source|stream_url)/, "--video"],
  [/^assets\.image_file_path/, "--face"],
  [/^assets\.face_mappings/, "--map"],
  [/^start_seconds/, "--start"],
  [/^end_seconds/, "--end"],
  [/^style/, "--style"],
  [/^name/, "--name"],
];

class UsageError extends Error {}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined) {
    process.stderr.write(HELP);
    return 2;
  }
  if (command === "--help" || command === "-h" || command === "help") {
    process.stdout.write(HELP);
    return 0;
  }
  if (command === "generate") return generateCommand(rest);
  if (command === "status" || command === "cancel") return projectCommand(command, rest);
  throw new UsageError(`unknown command "${command}"; expected generate, status or cancel (see --help)`);
}

async function generateCommand(args: string[]): Promise<number> {
  const { values } = parse(args, GENERATE, false);
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (!values.video) throw new UsageError("--video is required");
  if (values.face !== undefined && values.map !== undefined) throw new UsageError("--face and --map cannot be combined: --face swaps every face, --map chosen ones");
  if (values.face === undefined && values.map === undefined) throw new UsageError("--face (or at least one --map) is required");
  if (values.end === undefined) throw new UsageError("--end is required (seconds)");
  if (values.style !== undefined && !["v1", "v2", "default"].includes(values.style)) throw new UsageError(`--style must be v1, v2 or default, got "${values.style}"`);
  if (!values.wait && values.out !== undefined) throw new UsageError("--out has nothing to download with --no-wait");
  const faceMappings = (values.map ?? []).map((pair) => {
    const at = pair.indexOf("=");
    if (at <= 0 || at === pair.length - 1) throw new UsageError(`--map takes <original>=<new>, got "${pair}"`);
    return { originalFace: pair.slice(0, at), newFace: pair.slice(at + 1) };
  });
  const startSeconds = seconds("--start", values.start ?? "0");
  const endSeconds = seconds("--end", values.end);
  // Checked before anything is uploaded: the server would refuse the job only after the uploads.
  if (endSeconds <= startSeconds) throw new UsageError(`--end must be greater than --start (${startSeconds}), got ${endSeconds}`);
  if (values.out !== undefined) await writableDirectory(values.out);
  const request = {
    name: values.name,
    startSeconds,
    endSeconds,
    style: values.style === undefined ? undefined : { version: values.style },
    assets: {
      videoSource: "file",
      videoFilePath: values.video,
      faceSwapMode: faceMappings.length > 0 ? "individual-faces" : "all-faces",
      imageFilePath: values.face,
      faceMappings,
    },
  };

  const client = connect(values);
  const controller = new AbortController();
  const interrupt = () => controller.abort(new Error("interrupted"));
  process.once("SIGINT", interrupt);
  const progress = progressWriter();
  try {
    const result = await client.faceSwap.generate(request, {
      waitForCompletion: values.wait,
      downloadOutputs: values.download,
      downloadDirectory: values.out,
      onProgress: progress.write,
      signal: controller.signal,
    });
    progress.end();
    printJson({ ...summary(result.project), downloadedPaths: result.downloadedPaths });
    return 0;
  } catch (error) {
    progress.end();
    if (controller.signal.aborted) {
      process.stderr.write("faceswap: interrupted; the project was canceled\n");
      return 130;
    }
    if (error instanceof FaceSwapJobError) {
      printJson({ ...summary(error.project), downloadedPaths: [] });
      process.stderr.write(`faceswap: ${error.message} (${error.code})\n`);
      return 1;
    }
    if (error instanceof FaceSwapInputError) throw new UsageError(`${flagOf(error.field)}: ${error.file} ${error.reason}`);
    throw error;
  } finally {
    process.off("SIGINT", interrupt);
    client.close();
  }
}

async function projectCommand(command: "status" | "cancel", args: string[]): Promise<number> {
  const { values, positionals } = parse(args, COMMON, true);
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError(`${command} takes one project id, got ${positionals.length}`);
  const client = connect(values);
  try {
    const id = positionals[0]!;
    const { project } =
      command === "status" ? await client.videoProjects.getVideoProject({ id }) : await client.videoProjects.cancelVideoProject({ id });
    printJson({ ...summary(project!), downloads: project!.downloads.map((d) => d.url) });
    return 0;
  } finally {
    client.close();
  }
}

function parse<T extends ParseArgsOptionsConfig>(args: string[], options: T, allowPositionals: boolean) {
  try {
    return parseArgs({ args, options, allowPositionals, allowNegative: true, strict: true });
  } catch (error) {
    // parseArgs names the flag in its message, e.g. "Unknown option '--vidoe'".
    throw new UsageError((error as Error).message);
  }
}

function connect(values: { address?: string; token?: string }): AtriumClient {
  const token = values.token ?? process.env.ATRIUM_TOKEN;
  if (!token) throw new UsageError("--token (or ATRIUM_TOKEN) is required");
  return createClient({ address: values.address ?? (process.env.ATRIUM_ADDRESS || "localhost:50051"), token });
}

function seconds(flag: string, value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0) throw new UsageError(`${flag} must be a number of seconds >= 0, got "${value}"`);
  return n;
}

/** Makes `dir` if it is missing; a UsageError when it cannot be written to, before the render is paid for. */
async function writableDirectory(dir: string): Promise<void> {
  try {
    await fs.mkdir(dir, { recursive: true });
    await fs.access(dir, fsConstants.W_OK);
  } catch (error) {
    throw new UsageError(`--out: ${dir} is not a directory this user can write to (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

function flagOf(field: string): string {
  return FLAGS.find(([pattern]) => pattern.test(field))?.[1] ?? field;
}

function summary(project: VideoProject) {
  return {
    id: project.id,
    name: project.name,
    status: project.status,
    creditsCharged: project.creditsCharged,
    framesRendered: project.framesRendered,
    framesTotal: project.framesTotal,
    error: project.error ?? null,
  };
}

function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** A single redrawn bar on a terminal; JSON lines (structured logs) anywhere else. */
function progressWriter(): { write: (event: GenerateProgress) => void; end: () => void } {
  const stderr = process.stderr;
  if (!stderr.isTTY) {
    return {
      write: (event) => {
        const fields = event.stage === "complete" ? { stage: event.stage, projectId: event.project.id } : event;
        stderr.write(`${JSON.stringify({ time: new Date().toISOString(), event: "progress", ...fields })}\n`);
      },
      end: () => {},
    };
  }
  let drawn = false;
  return {
    write: (event) => {
      const [label, fraction] = describe(event);
      const width = 30;
      const filled = fraction === undefined ? 0 : Math.floor(fraction * width);
      const percent = fraction === undefined ? "   ?" : `${Math.floor(fraction * 100)}`.padStart(3) + "%";
      const columns = stderr.columns || 80;
      const line = `${percent} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${label}`.slice(0, columns - 1);
      stderr.write(`\r\x1b[2K${line}`);
      drawn = true;
    },
    end: () => {
      if (drawn) stderr.write("\n");
      drawn = false;
    },
  };
}

function describe(event: GenerateProgress): [string, number | undefined] {
  switch (event.stage) {
    case "upload":
    case "download":
      return [
        `${event.stage} ${path.basename(event.file)}`,
        event.totalBytes ? event.bytes / event.totalBytes : event.bytes > 0 ? undefined : 0,
      ];
    case "queued":
    case "rendering":
      return [`${event.stage} ${event.framesRendered}/${event.framesTotal} frames`, event.framesTotal ? event.framesRendered / event.framesTotal : 0];
    case "complete":
      return [`complete ${event.project.id}`, 1];
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof UsageError) {
      process.stderr.write(`faceswap: ${error.message}\n`);
      process.exitCode = 2;
    } else if (error instanceof ApiError) {
      const fields = error.fieldViolations.map((v) => `\n  ${flagOf(v.field)}: ${v.description}`).join("");
      process.stderr.write(`faceswap: ${error.codeName}: ${error.message}${fields}\n`);
      process.exitCode = error.code === Code.INVALID_ARGUMENT ? 2 : 1;
    } else {
      process.stderr.write(`faceswap: ${(error as Error).message ?? String(error)}\n`);
      process.exitCode = 1;
    }
  },
);
