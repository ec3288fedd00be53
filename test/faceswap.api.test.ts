import { randomBytes, randomUUID } from "node:crypto";
import fs from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { credentials, makeGenericClientConstructor, Metadata } from "@grpc/grpc-js";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CreateFaceSwapRequest, FaceSwapServiceService } from "../gen/faceswap/v1/face_swap_service.js";
import { Code } from "../src/client/index.js";
import { UrlSigner } from "../src/platform/blobs/signed-urls.js";
import { probeMedia, runFfmpeg } from "../src/platform/media/ffmpeg.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { until } from "./support/expect.js";
import { api, expectFailure, expectOk, fundedAccount, toCamel, TRANSPORTS, uploadFile, type Outcome } from "./support/faceswap.js";
import { makeClip, samplePhoto } from "./support/footage.js";
import { Receiver } from "./support/receiver.js";

const SECRET = "faceswap-api-test-blob-signing-secret-0123456789";
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
const IMAGE_LIMIT = 1000;

/** Renders jobs (one at a time); private URLs allowed (the test's servers are on loopback). */
let t: TestApp;
/** Never renders (jobs stay queued); private URLs refused; images limited to 1000 bytes. */
let q: TestApp;
let dir: string;
let files: http.Server;
let filesUrl: string;

/** 2 s, 10 fps, 320x214, a face in every frame. */
let clip: string;
/** 1 s, 5 fps, 1280x854. */
let wideClip: string;
/** A 16x16 PNG, small enough for q's image limit. */
let tinyPng: string;

/** An account on q with uploads: what the rule tests reference. */
interface Uploads {
  video: string;
  image: string;
  garbage: string;
  /** One second of picture under three of sound. */
  shortPicture: string;
}
let owner: { accountId: string; key: string };
let mine: Uploads;
/** Another account on q and its upload. */
let strangerVideo: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "faceswap-api-"));
  const env = { BLOB_SIGNING_SECRET: SECRET, JOB_POLL_MS: "200" };
  const footage = Promise.all([
    makeClip(path.join(dir, "clip.mp4"), { seconds: 2, fps: 10, width: 320 }),
    makeClip(path.join(dir, "wide.mp4"), { seconds: 1, fps: 5, width: 1280 }),
    runFfmpeg(["-y", "-loglevel", "error", "-f", "lavfi", "-i", "color=c=red:s=16x16", "-frames:v", "1", path.join(dir, "tiny.png")]),
    runFfmpeg([
      "-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=20:duration=1",
      "-f", "lavfi", "-i", "sine=frequency=440:duration=3", "-c:v", "libx264", "-preset", "ultrafast",
      "-pix_fmt", "yuv420p", "-c:a", "aac", path.join(dir, "short-picture.mp4"),
    ]),
  ]);
  // Settled, not Promise.all: an app that started is assigned (and stopped by afterAll) even when the other failed.
  const started = await Promise.allSettled([
    createTestDatabase()
      .then((db) => startTestApp(db, { ...env, DATA_DIR: path.join(dir, "t-data") }))
      .then((app) => (t = app)),
    createTestDatabase()
      .then((db) =>
        startTestApp(db, {
          ...env,
          DATA_DIR: path.join(dir, "q-data"),
          RENDER_CONCURRENCY: "0",
          WEBHOOK_ALLOW_PRIVATE: "false",
          UPLOAD_MAX_IMAGE_BYTES: String(IMAGE_LIMIT),
        }),
      )
      .then((app) => (q = app)),
    footage.then(([c, w]) => {
      clip = c;
      wideClip = w;
    }),
  ]);
  for (const result of started) if (result.status === "rejected") throw result.reason;
  tinyPng = path.join(dir, "tiny.png");

  // Serves the clip for URL inputs.
  files = http.createServer((req, res) => {
    if (req.url === "/clip.mp4") {
      void fs.readFile(clip).then((bytes) => res.writeHead(200, { "content-type": "video/mp4" }).end(bytes));
    } else if (req.url === "/garbage.mp4") {
      res.writeHead(200, { "content-type": "video/mp4" }).end(randomBytes(2048));
    } else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => files.listen(0, "127.0.0.1", resolve));
  filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;

  owner = await fundedAccount(q, 1_000_000);
  const stranger = await fundedAccount(q, 1_000_000);
  const [video, image, garbage, foreign, shortPicture] = await Promise.all([
    uploadFile(q, owner.key, "video", "mp4", clip),
    uploadFile(q, owner.key, "image", "png", tinyPng),
    uploadFile(q, owner.key, "video", "mp4", randomBytes(4096)),
    uploadFile(q, stranger.key, "video", "mp4", clip),
    uploadFile(q, owner.key, "video", "mp4", path.join(dir, "short-picture.mp4")),
  ]);
  mine = { video, image, garbage, shortPicture };
  strangerVideo = foreign;
}, 120_000);

afterAll(async () => {
  await Promise.allSettled([t?.stop(), q?.stop()]);
  files?.closeAllConnections();
  await new Promise((resolve) => files?.close(resolve));
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

/** A request q accepts: the owner's clip and face, seconds 0..1. */
function valid(overrides: Record<string, unknown> = {}, assets: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    assets: { video_source: "file", video_file_path: mine.video, image_file_path: mine.image, ...assets },
    start_seconds: 0,
    end_seconds: 1,
    ...overrides,
  };
}

describe("CreateUploadUrls", () => {
  it.each(TRANSPORTS)("%s: one URL per item in order, file_path api-assets/<account>/<id>.<ext>, valid 15 minutes", async (transport) => {
    const before = Date.now();
    const outcome = await api(q, transport, owner.key).createUploadUrls({
      items: [
        { type: "video", extension: "mp4" },
        { type: "image", extension: "png" },
        { type: "audio", extension: "mp3" },
        { type: "video", extension: "webm" },
      ],
    });
    expectOk(outcome);
    const items = outcome.body.items as { upload_url: string; file_path: string; expires_at: string }[];
    expect(items.map((i) => i.file_path.slice(i.file_path.lastIndexOf(".") + 1))).toEqual(["mp4", "png", "mp3", "webm"]);
    for (const item of items) {
      expect(item.file_path).toMatch(new RegExp(`^api-assets/${owner.accountId}/${UUID}\\.[a-z0-9]+$`));
      expect(Math.abs(Date.parse(item.expires_at) - (before + 15 * 60_000))).toBeLessThan(5_000);
      expect(item.upload_url).toContain(`/blobs/${item.file_path}?`);
    }
    expect(new Set(items.map((i) => i.file_path)).size).toBe(4);
    const put = await fetch(items[0]!.upload_url, { method: "PUT", body: randomBytes(100) });
    expect(put.status).toBe(200);
    expect(await put.json()).toEqual({ file_path: items[0]!.file_path, size: 100 });
  });

  const badItems: [string, unknown[], string][] = [
    ["an unknown type", [{ type: "document", extension: "pdf" }], "items[0].type"],
    ["an empty type", [{ type: "", extension: "mp4" }], "items[0].type"],
    ["an extension with a dot", [{ type: "video", extension: ".mp4" }], "items[0].extension"],
    ["an upper-case extension", [{ type: "video", extension: "MP4" }], "items[0].extension"],
    ["an unknown extension", [{ type: "video", extension: "exe" }], "items[0].extension"],
    ["an image extension for a video", [{ type: "video", extension: "png" }], "items[0].extension"],
    ["a video extension for an image", [{ type: "video", extension: "mp4" }, { type: "image", extension: "mp4" }], "items[1].extension"],
    ["no items", [], "items"],
    ["101 items", Array.from({ length: 101 }, () => ({ type: "image", extension: "png" })), "items"],
  ];
  describe.each(TRANSPORTS)("%s", (transport) => {
    it.each(badItems)("refuses %s naming the field", async (_label, items, field) => {
      expectFailure(await api(q, transport, owner.key).createUploadUrls({ items }), Code.INVALID_ARGUMENT, 400, field);
    });
  });
});

describe("the /blobs/ upload and download route", () => {
  const signer = () => new UrlSigner(SECRET, () => t.httpUrl);

  async function expectDenied(response: Response, reason: string): Promise<void> {
    expect(response.status).toBe(403);
    expect(response.headers.get("content-type")).toContain("application/json");
    const body = (await response.json()) as { details: { "@type": string; reason?: string }[] };
    expect(body).toMatchObject({ code: Code.PERMISSION_DENIED, message: expect.any(String) });
    expect(body.details.find((d) => d["@type"].endsWith("ErrorInfo"))?.reason).toBe(reason);
  }

  it("refuses an expired upload URL with 403 URL_EXPIRED", async () => {
    const url = signer().sign("PUT", `api-assets/${randomUUID()}/${randomUUID()}.png`, new Date(Date.now() - 60_000), 1000);
    await expectDenied(await fetch(url, { method: "PUT", body: randomBytes(10) }), "URL_EXPIRED");
  });

  it("refuses a tampered URL with 403 BAD_SIGNATURE", async () => {
    const user = await createAccountWithKey(t, ["faceswap"]);
    const { items } = await t.client(user.key).files.createUploadUrls({ items: [{ type: "image", extension: "png" }] });
    const issued = new URL(items[0]!.uploadUrl);
    const later = new URL(issued);
    later.searchParams.set("expires", String(Number(issued.searchParams.get("expires")) + 3600));
    const bigger = new URL(issued);
    bigger.searchParams.set("max_bytes", String(Number(issued.searchParams.get("max_bytes")) * 2));
    const otherKey = new URL(issued);
    otherKey.pathname = otherKey.pathname.replace(/[^/]+\.png$/, `${randomUUID()}.png`);
    for (const url of [later, bigger, otherKey]) {
      await expectDenied(await fetch(url, { method: "PUT", body: randomBytes(10) }), "BAD_SIGNATURE");
    }
    // An upload URL does not download.
    await expectDenied(await fetch(issued), "BAD_SIGNATURE");
  });

  it("refuses an upload over the type's limit with 413, storing nothing", async () => {
    const photo = await fs.readFile(samplePhoto(1));
    const { items } = await q.client(owner.key).files.createUploadUrls({
      items: [
        { type: "image", extension: "jpg" },
        { type: "image", extension: "jpg" },
      ],
    });
    // Declared too large, and streamed (chunked) past the limit.
    const declared = await fetch(items[0]!.uploadUrl, { method: "PUT", body: photo });
    const streamed = await fetch(items[1]!.uploadUrl, {
      method: "PUT",
      body: new Blob([photo]).stream(),
      duplex: "half",
    } as RequestInit);
    for (const response of [declared, streamed]) {
      expect(response.status).toBe(413);
      const body = (await response.json()) as unknown;
      expect(body).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, message: expect.stringContaining(String(IMAGE_LIMIT)) });
    }
    for (const item of items) {
      const created = await api(q, "grpc", owner.key).createFaceSwap(valid({}, { image_file_path: item.filePath }));
      expectFailure(created, Code.INVALID_ARGUMENT, 400, "assets.image_file_path");
      expect(created.message).toContain("no uploaded file");
    }
  });

  it("serves downloads with ranges and HEAD", async () => {
    const user = await createAccountWithKey(t, ["faceswap"]);
    const bytes = randomBytes(5000);
    const key = await uploadFile(t, user.key, "image", "png", bytes);
    const url = signer().sign("GET", key, new Date(Date.now() + 60_000));

    const whole = await fetch(url);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("accept-ranges")).toBe("bytes");
    expect(Buffer.from(await whole.arrayBuffer())).toEqual(bytes);

    const part = await fetch(url, { headers: { range: "bytes=100-199" } });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe("bytes 100-199/5000");
    expect(Buffer.from(await part.arrayBuffer())).toEqual(bytes.subarray(100, 200));

    const tail = await fetch(url, { headers: { range: "bytes=-10" } });
    expect(tail.status).toBe(206);
    expect(tail.headers.get("content-range")).toBe("bytes 4990-4999/5000");

    const unsatisfiable = await fetch(url, { headers: { range: "bytes=6000-" } });
    expect(unsatisfiable.status).toBe(416);
    expect(unsatisfiable.headers.get("content-range")).toBe("bytes */5000");
    // An invalid range, or one asked for only if a validator matches (these answers carry none), is the whole file.
    for (const headers of [{ range: "bytes=5-3" }, { range: "bytes=100-199", "if-range": '"bogus"' }]) {
      const full = await fetch(url, { headers });
      expect(full.status).toBe(200);
      expect(Buffer.from(await full.arrayBuffer())).toEqual(bytes);
    }

    const head = await fetch(url, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-length")).toBe("5000");
    expect(head.headers.get("content-type")).toBe("image/png");
    expect((await head.arrayBuffer()).byteLength).toBe(0);

    const missing = await fetch(signer().sign("GET", `api-assets/${user.accountId}/${randomUUID()}.png`, new Date(Date.now() + 60_000)));
    expect(missing.status).toBe(404);
  });
});

type Rule = [label: string, request: () => Record<string, unknown>, field: string];

describe("CreateFaceSwap rules", () => {
  const rules: Rule[] = [
    ["missing assets", () => ({ start_seconds: 0, end_seconds: 1 }), "assets"],
    ["missing video_source", () => valid({}, { video_source: "" }), "assets.video_source"],
    ["an unknown video_source", () => valid({}, { video_source: "s3" }), "assets.video_source"],
    ["file without video_file_path", () => valid({}, { video_file_path: "" }), "assets.video_file_path"],
    ["stream without stream_url", () => valid({}, { video_source: "stream", video_file_path: "" }), "assets.stream_url"],
    ["youtube without a URL", () => valid({}, { video_source: "youtube", video_file_path: "" }), "assets.stream_url"],
    ["a stream URL that is not http(s)", () => valid({}, { video_source: "stream", stream_url: "ftp://example.com/a.mp4" }), "assets.stream_url"],
    ["a private stream URL (the guard refuses it)", () => valid({}, { video_source: "stream", stream_url: `${filesUrl}/clip.mp4` }), "assets.stream_url"],
    ["a youtube_url pointing at a private address", () => valid({}, { video_source: "youtube", youtube_url: "http://169.254.169.254/latest" }), "assets.youtube_url"],
    ["an unknown face_swap_mode", () => valid({}, { face_swap_mode: "some-faces" }), "assets.face_swap_mode"],
    ["all-faces without image_file_path", () => valid({}, { face_swap_mode: "all-faces", image_file_path: "" }), "assets.image_file_path"],
    ["no mode (all-faces by default) without image_file_path", () => valid({}, { image_file_path: "" }), "assets.image_file_path"],
    ["individual-faces without mappings", () => valid({}, { face_swap_mode: "individual-faces", face_mappings: [] }), "assets.face_mappings"],
    [
      "a mapping without new_face",
      () => valid({}, { face_swap_mode: "individual-faces", face_mappings: [{ original_face: mine.image, new_face: "" }] }),
      "assets.face_mappings[0].new_face",
    ],
    [
      "a mapping without original_face",
      () =>
        valid({}, {
          face_swap_mode: "individual-faces",
          face_mappings: [
            { original_face: mine.image, new_face: mine.image },
            { original_face: "", new_face: mine.image },
          ],
        }),
      "assets.face_mappings[1].original_face",
    ],
    ["a negative start_seconds", () => valid({ start_seconds: -1 }), "start_seconds"],
    ["end_seconds equal to start_seconds", () => valid({ start_seconds: 1, end_seconds: 1 }), "end_seconds"],
    ["end_seconds before start_seconds", () => valid({ start_seconds: 1, end_seconds: 0.5 }), "end_seconds"],
    ["no end_seconds", () => valid({ end_seconds: undefined }), "end_seconds"],
    ["no start_seconds", () => valid({ start_seconds: undefined }), "start_seconds"],
    ["start_seconds at the video's end", () => valid({ start_seconds: 2, end_seconds: 3 }), "start_seconds"],
    ["start_seconds beyond the video's end", () => valid({ start_seconds: 5, end_seconds: 6 }), "start_seconds"],
    [
      "start_seconds past the last frame while the sound runs on",
      () => valid({ start_seconds: 2, end_seconds: 3 }, { video_file_path: mine.shortPicture }),
      "start_seconds",
    ],
    ["an unknown style.version", () => valid({ style: { version: "v3" } }), "style.version"],
    ["a name over 200 characters", () => valid({ name: "n".repeat(201) }), "name"],
    ["another account's video path", () => valid({}, { video_file_path: strangerVideo }), "assets.video_file_path"],
    ["an unknown path", () => valid({}, { video_file_path: `api-assets/${owner.accountId}/${randomUUID()}.mp4` }), "assets.video_file_path"],
    ["a path outside api-assets/", () => valid({}, { video_file_path: "uploads/clip.mp4" }), "assets.video_file_path"],
    ["a path climbing out", () => valid({}, { video_file_path: `api-assets/${owner.accountId}/../x.mp4` }), "assets.video_file_path"],
    ["an undecodable video", () => valid({}, { video_file_path: mine.garbage }), "assets.video_file_path"],
    ["an image as the video", () => valid({}, { video_file_path: mine.image }), "assets.video_file_path"],
    ["a video as the face image", () => valid({}, { image_file_path: mine.video }), "assets.image_file_path"],
    [
      "another account's path as a mapping's new_face",
      () => valid({}, { face_swap_mode: "individual-faces", face_mappings: [{ original_face: mine.image, new_face: strangerVideo }] }),
      "assets.face_mappings[0].new_face",
    ],
  ];

  describe.each(TRANSPORTS)("%s", (transport) => {
    it.each(rules)("refuses %s naming the field", async (_label, request, field) => {
      const before = await api(q, "grpc", owner.key).account();
      expectFailure(await api(q, transport, owner.key).createFaceSwap(request()), Code.INVALID_ARGUMENT, 400, field);
      expect((await api(q, "grpc", owner.key).account()).credit_balance).toBe(before.credit_balance);
    });

    it("answers another account's path exactly like a missing one", async () => {
      const client = api(q, transport, owner.key);
      const missing = `api-assets/${owner.accountId}/${randomUUID()}.mp4`;
      const foreign = await client.createFaceSwap(valid({}, { video_file_path: strangerVideo }));
      const absent = await client.createFaceSwap(valid({}, { video_file_path: missing }));
      expect(foreign.message.replace(strangerVideo, "<path>")).toBe(absent.message.replace(missing, "<path>"));
      expect(foreign.reason).toBe(absent.reason);
      expect(foreign.code).toBe(absent.code);
    });

    it("reports every shape problem at once", async () => {
      const outcome = await api(q, transport, owner.key).createFaceSwap({
        assets: { video_source: "tape", face_swap_mode: "x" },
        start_seconds: -2,
        end_seconds: -3,
        style: { version: "v9" },
      });
      expectFailure(outcome, Code.INVALID_ARGUMENT, 400);
      expect(outcome.fields).toEqual(
        expect.arrayContaining(["assets.video_source", "assets.face_swap_mode", "start_seconds", "end_seconds", "style.version"]),
      );
    });

    it("says a start or end that is not a finite number is not one", async () => {
      // Proto3 JSON writes them as strings; over gRPC they are doubles.
      const value = (n: number) => (transport === "http" ? String(n) : n);
      const outcome = await api(q, transport, owner.key).createFaceSwap(valid({ start_seconds: value(NaN), end_seconds: value(Infinity) }));
      expectFailure(outcome, Code.INVALID_ARGUMENT, 400);
      expect(outcome.message).toBe("start_seconds: must be a finite number of seconds, got NaN; end_seconds: must be a finite number of seconds, got Infinity");
    });

    it("accepts individual-faces with mappings, style v1, and mode left out (all-faces)", async () => {
      const client = api(q, transport, owner.key);
      for (const request of [
        valid({ style: { version: "v1" } }, { face_swap_mode: "individual-faces", image_file_path: "", face_mappings: [{ original_face: mine.image, new_face: mine.image }] }),
        valid({ style: { version: "default" } }),
        valid({}, { face_swap_mode: "all-faces" }),
      ]) {
        const outcome = await client.createFaceSwap(request);
        expectOk(outcome);
        expect(outcome.body).toEqual({ id: expect.stringMatching(new RegExp(`^${UUID}$`)), credits_charged: 30, estimated_frame_cost: 30 });
      }
    });

    it("accepts deprecated width and height, saying they are deprecated", async () => {
      const outcome = await api(q, transport, owner.key).createFaceSwap(valid({ width: 1920, height: 1080 }));
      expectOk(outcome);
      if (transport === "http") {
        expect(outcome.headers.deprecation).toBe("true");
        expect(outcome.headers.warning).toMatch(/^299 - ".*deprecated.*"$/);
      }
      const project = await api(q, transport, owner.key).get(outcome.body.id);
      // The output size follows the video (320 wide, under the free cap), not the deprecated fields.
      expect(project.body).toMatchObject({ width: 320, height: 214 });
    });
  });

  it("http: accepts camelCase field names", async () => {
    const client = api(q, "http", owner.key);
    const outcome = await client.createFaceSwap({
      assets: { videoSource: "file", videoFilePath: mine.video, faceSwapMode: "all-faces", imageFilePath: mine.image },
      startSeconds: 0.5,
      endSeconds: 1.5,
      name: "camel",
      style: { version: "v2" },
    });
    expectOk(outcome);
    expect(outcome.body.credits_charged).toBe(30);
    expect((await client.get(outcome.body.id)).body).toMatchObject({ name: "camel", start_seconds: 0.5, end_seconds: 1.5 });
    // Without a deprecated field there is no deprecation header.
    expect(outcome.headers.deprecation).toBeUndefined();
  });

  it("http: a body that is not a JSON object is a 400, not a 500", async () => {
    for (const body of ["[1,2]", "{", '"text"']) {
      const result = await q.http("POST", "/v1/face-swap", { token: owner.key, body });
      expect(result.status, body).toBe(400);
      expect(result.body).toMatchObject({ code: Code.INVALID_ARGUMENT, message: expect.any(String) });
    }
  });

  it.each(TRANSPORTS)("%s: a URL input of a refused create is not kept", async (transport) => {
    const w = await workspace(t, 0);
    const client = api(t, transport, w.key);
    const imports = path.join(dir, "t-data", "blobs", "api-assets", w.accountId, "imports");
    const kept = async () => (await fs.readdir(imports).catch(() => [])).length;
    const stream = (url: string, extra: Record<string, unknown> = {}) => ({
      assets: { video_source: "stream", stream_url: url, image_file_path: w.image },
      start_seconds: 0,
      end_seconds: 1,
      ...extra,
    });
    // Undecodable, starting after the end, and valid but unaffordable: each fetched, none kept.
    expectFailure(await client.createFaceSwap(stream(`${filesUrl}/garbage.mp4`)), Code.INVALID_ARGUMENT, 400, "assets.stream_url");
    expectFailure(await client.createFaceSwap(stream(`${filesUrl}/clip.mp4`, { start_seconds: 5, end_seconds: 6 })), Code.INVALID_ARGUMENT, 400, "start_seconds");
    expectFailure(await client.createFaceSwap(stream(`${filesUrl}/clip.mp4`)), Code.RESOURCE_EXHAUSTED, 429);
    expect(await kept()).toBe(0);
  });

  it.each(TRANSPORTS)("%s: the youtube alias takes youtube_url, fetched through the SSRF guard", async (transport) => {
    const user = await fundedAccount(t, 1000);
    const image = await uploadFile(t, user.key, "image", "jpg", samplePhoto(2));
    const client = api(t, transport, user.key);
    const outcome = await client.createFaceSwap({
      assets: { video_source: "youtube", youtube_url: `${filesUrl}/clip.mp4`, image_file_path: image },
      start_seconds: 0,
      end_seconds: 1,
    });
    expectOk(outcome);
    expect(outcome.body.credits_charged).toBe(30);
    const gone = await client.createFaceSwap({
      assets: { video_source: "stream", stream_url: `${filesUrl}/missing.mp4`, image_file_path: image },
      start_seconds: 0,
      end_seconds: 1,
    });
    expectFailure(gone, Code.INVALID_ARGUMENT, 400, "assets.stream_url");
    expect(gone.message).toContain("404");
    // Not left queued for the other tests' renders.
    expectOk(await client.cancel(outcome.body.id));
  });
});


/** A fresh funded account on `app` with the clip and a face uploaded; `request(start, end)` builds a create request with them. */
async function workspace(app: TestApp, credits: number, options: { plan?: "free" | "pro" | "business"; video?: string; scopes?: string[] } = {}) {
  const user = await fundedAccount(app, credits, options.plan ?? "free", options.scopes);
  const [video, image] = await Promise.all([
    uploadFile(app, user.key, "video", "mp4", options.video ?? clip),
    app === q ? uploadFile(app, user.key, "image", "png", tinyPng) : uploadFile(app, user.key, "image", "jpg", samplePhoto(2)),
  ]);
  const request = (start: number, end: number, extra: Record<string, unknown> = {}) => ({
    assets: { video_source: "file", video_file_path: video, image_file_path: image },
    start_seconds: start,
    end_seconds: end,
    ...extra,
  });
  return { ...user, video, image, request };
}

/** Polls the project until it leaves queued/rendering; fails at once if it did not complete. */
async function completed(client: ReturnType<typeof api>, id: string): Promise<Outcome["body"]> {
  let project: Outcome["body"];
  await until(
    async () => {
      const outcome = await client.get(id);
      expectOk(outcome);
      project = outcome.body;
      return project.status !== "queued" && project.status !== "rendering";
    },
    45_000,
    `project ${id} to finish`,
  );
  expect(project, JSON.stringify(project)).toMatchObject({ status: "complete", error: null });
  return project;
}

async function download(url: string, name: string): Promise<string> {
  const response = await fetch(url);
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toBe("video/mp4");
  const file = path.join(dir, `${name}-${randomUUID()}.mp4`);
  await fs.writeFile(file, Buffer.from(await response.arrayBuffer()));
  return file;
}

describe("credits", () => {
  it.each(TRANSPORTS)("%s: reserves ceil((end - start) * 30) at once, end clipped to the video; cancel refunds it all, once", async (transport) => {
    const w = await workspace(q, 1000);
    const client = api(q, transport, w.key);
    const first = await client.createFaceSwap(w.request(0, 10));
    expectOk(first);
    // The clip is 2 s: 0..10 is billed as 0..2.
    expect(first.body).toMatchObject({ credits_charged: 60, estimated_frame_cost: 60 });
    expect(await client.account()).toMatchObject({ credit_balance: 940, credits_reserved: 60 });
    const second = await client.createFaceSwap(w.request(0.5, 1.75));
    expect(second.body).toMatchObject({ credits_charged: 38, estimated_frame_cost: 38 });
    expect(await client.account()).toMatchObject({ credit_balance: 902, credits_reserved: 98 });

    const queued = await client.get(first.body.id);
    expect(queued.body).toMatchObject({
      status: "queued",
      start_seconds: 0,
      end_seconds: 2,
      credits_charged: 60,
      total_frame_cost: 60,
      frames_rendered: 0,
      frames_total: 20,
      fps: 10,
      enabled: true,
      downloads: [],
      download: null,
      error: null,
    });

    const canceled = await client.cancel(first.body.id);
    expectOk(canceled);
    expect(canceled.body).toMatchObject({ id: first.body.id, status: "canceled", credits_charged: 0, downloads: [] });
    expect(await client.account()).toMatchObject({ credit_balance: 962, credits_reserved: 38 });
    const again = await client.cancel(first.body.id);
    expectOk(again);
    expect(again.body.status).toBe("canceled");
    expect(await client.account()).toMatchObject({ credit_balance: 962, credits_reserved: 38 });

    // Delete cancels a queued project first, refunding it.
    expectOk(await client.delete(second.body.id));
    expect((await client.get(second.body.id)).body).toMatchObject({ status: "canceled", enabled: false });
    expect(await client.account()).toMatchObject({ credit_balance: 1000, credits_reserved: 0 });
  });

  it.each(TRANSPORTS)("%s: too few credits is RESOURCE_EXHAUSTED naming the shortfall; nothing queued; a quota.exceeded event", async (transport) => {
    const w = await workspace(t, 10, { scopes: ["webhooks"] });
    let secret = "";
    const receiver = await Receiver.start(() => secret);
    try {
      const { webhook } = await t.client(w.key).webhooks.createWebhook({ url: receiver.url, events: ["quota.exceeded"] });
      secret = webhook!.secret;
      const client = api(t, transport, w.key);
      const outcome = await client.createFaceSwap(w.request(0, 2));
      expectFailure(outcome, Code.RESOURCE_EXHAUSTED, 429);
      expect(outcome.reason).toBe("INSUFFICIENT_CREDITS");
      expect(outcome.message).toContain("60");
      expect(outcome.message).toContain("short by 50");
      expect((await client.list()).body.projects).toEqual([]);
      expect(await client.account()).toMatchObject({ credit_balance: 10, credits_reserved: 0 });

      const [delivery] = await receiver.waitFor(1);
      expect(delivery!.signatureValid).toBe(true);
      expect(delivery!.body).toMatchObject({
        event: "quota.exceeded",
        data: { quota: "credits", required: 60, balance: 10, shortfall: 50 },
      });
    } finally {
      await receiver.stop();
    }
  });

  it.each(TRANSPORTS)("%s: the shortest clip still costs a credit (no free frames)", async (transport) => {
    const w = await workspace(q, 0);
    const client = api(q, transport, w.key);
    const tiny = w.request(1, 1.000000001);
    const refused = await client.createFaceSwap(tiny);
    expectFailure(refused, Code.RESOURCE_EXHAUSTED, 429);
    expect((await client.list()).body.projects).toEqual([]);
    await q.admin.admin.grantCredits({ accountId: w.accountId, amount: 5, reason: "test" });
    const created = await client.createFaceSwap(tiny);
    expectOk(created);
    expect(created.body).toMatchObject({ credits_charged: 1, estimated_frame_cost: 1 });
    expect(await client.account()).toMatchObject({ credit_balance: 4, credits_reserved: 1 });
  });

  it("concurrent creates never take more than the balance", async () => {
    const w = await workspace(q, 100);
    const outcomes = await Promise.all(TRANSPORTS.flatMap((transport) => [0, 1, 2].map(() => api(q, transport, w.key).createFaceSwap(w.request(0, 1)))));
    // 30 credits each: three of the six fit.
    expect(outcomes.filter((o) => o.code === 0)).toHaveLength(3);
    for (const refused of outcomes.filter((o) => o.code !== 0)) expectFailure(refused, Code.RESOURCE_EXHAUSTED, 429);
    expect(await api(q, "grpc", w.key).account()).toMatchObject({ credit_balance: 10, credits_reserved: 90 });
    expect((await api(q, "grpc", w.key).list()).body.projects).toHaveLength(3);
  });

  it.each(TRANSPORTS)("%s: settles to the frames rendered; a complete project cannot be canceled; delete removes its output", async (transport) => {
    const w = await workspace(t, 1000);
    const client = api(t, transport, w.key);
    // 1.5..10 of a 2 s clip: quoted as 0.5 s at 30 fps, rendered as 5 frames at the source's 10 fps.
    const created = await client.createFaceSwap(w.request(1.5, 10));
    expectOk(created);
    expect(created.body.credits_charged).toBe(15);
    const project = await completed(client, created.body.id);
    expect(project).toMatchObject({ frames_rendered: 5, frames_total: 5, credits_charged: 5, total_frame_cost: 5, enabled: true });
    expect(Date.parse(project.started_at)).toBeLessThanOrEqual(Date.parse(project.finished_at));
    expect(project.downloads).toHaveLength(1);
    expect(project.download).toEqual(project.downloads[0]);
    expect(Math.abs(Date.parse(project.download.expires_at) - (Date.now() + 24 * 3600_000))).toBeLessThan(60_000);
    expect(await client.account()).toMatchObject({ credit_balance: 995, credits_reserved: 0 });

    const url = project.download.url as string;
    const output = await probeMedia(await download(url, "settled"));
    expect(output).toMatchObject({ width: 320, height: 214, fps: 10, still: false });
    expect(output.durationSeconds).toBeCloseTo(0.5, 1);
    const part = await fetch(url, { headers: { range: "bytes=0-9" } });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toMatch(/^bytes 0-9\/\d+$/);

    expectFailure(await client.cancel(created.body.id), Code.FAILED_PRECONDITION, 400);
    expect(await client.account()).toMatchObject({ credit_balance: 995, credits_reserved: 0 });

    expectOk(await client.delete(created.body.id));
    expect((await client.get(created.body.id)).body).toMatchObject({ status: "complete", enabled: false, downloads: [], download: null });
    expect((await fetch(url)).status).toBe(404);
    expect(await client.account()).toMatchObject({ credit_balance: 995 });
  });
  it.each(TRANSPORTS)("%s: a render that fails ends in error with the reason and a full refund", async (transport) => {
    const w = await workspace(t, 100);
    const client = api(t, transport, w.key);
    // A plain red square: a valid image without a face.
    const faceless = await uploadFile(t, w.key, "image", "png", tinyPng);
    const created = await client.createFaceSwap({ ...w.request(0, 1), assets: { video_source: "file", video_file_path: w.video, image_file_path: faceless } });
    expectOk(created);
    expect(await client.account()).toMatchObject({ credit_balance: 70, credits_reserved: 30 });
    let project: Outcome["body"];
    await until(async () => {
      project = (await client.get(created.body.id)).body;
      return project.status !== "queued" && project.status !== "rendering";
    }, 45_000, "the project to finish");
    expect(project).toMatchObject({
      status: "error",
      error: { code: "no_face_in_source", message: expect.any(String) },
      credits_charged: 0,
      downloads: [],
      download: null,
    });
    expect(await client.account()).toMatchObject({ credit_balance: 100, credits_reserved: 0 });
    expectFailure(await client.cancel(created.body.id), Code.FAILED_PRECONDITION, 400);
  });
  it("cancel while rendering stops the render and refunds everything, once", async () => {
    const long = await makeClip(path.join(dir, `long-${randomUUID()}.mp4`), { seconds: 8, fps: 10, width: 320 });
    const w = await workspace(t, 1000, { video: long });
    const client = api(t, "http", w.key);
    const created = await client.createFaceSwap(w.request(0, 8));
    expect(created.body.credits_charged).toBe(240);
    await until(async () => (await client.get(created.body.id)).body.status !== "queued", 30_000, "the render to start");
    const canceled = await client.cancel(created.body.id);
    expectOk(canceled);
    expect(canceled.body).toMatchObject({ status: "canceled", credits_charged: 0, downloads: [] });
    expect(canceled.body.started_at).not.toBeNull();
    expect(await client.account()).toMatchObject({ credit_balance: 1000, credits_reserved: 0 });
    // The worker stops (within a second) and lets go of it: nothing it does later changes the project or the balance.
    await until(() => t.logs.some((line) => line.event === "job_stopped" && line.job_id === created.body.id && line.reason === "canceled"), 5_000, "the worker to stop");
    expect((await client.get(created.body.id)).body).toMatchObject({ status: "canceled", credits_charged: 0, downloads: [], download: null });
    expect(await client.account()).toMatchObject({ credit_balance: 1000, credits_reserved: 0 });
  });
});

describe("plans", () => {
  it("caps the long side at 576 (free), 1080 (pro), never upscales (business); project and file agree", async () => {
    const cases = [
      { plan: "free", transport: "grpc", width: 576, height: 384 },
      { plan: "pro", transport: "http", width: 1080, height: 720 },
      { plan: "business", transport: "grpc", width: 1280, height: 854 },
    ] as const;
    await Promise.all(
      cases.map(async ({ plan, transport, width, height }) => {
        const w = await workspace(t, 100, { plan, video: wideClip });
        const client = api(t, transport, w.key);
        expect((await client.account()).plan).toBe(plan);
        // One frame is enough to see the size.
        const created = await client.createFaceSwap(w.request(0, 0.2));
        expectOk(created);
        const project = await completed(client, created.body.id);
        expect({ plan, width: project.width, height: project.height }).toEqual({ plan, width, height });
        const file = await probeMedia(await download(project.download.url, plan));
        expect({ plan, width: file.width, height: file.height }).toEqual({ plan, width, height });
      }),
    );
  });

  it.each(TRANSPORTS)("%s: SetAccountPlan refuses an unknown plan naming plan", async (transport) => {
    const user = await createAccountWithKey(t, ["faceswap"]);
    const outcome: Outcome =
      transport === "grpc"
        ? await t.admin.admin.setAccountPlan({ accountId: user.accountId, plan: "gold" }).then(
            () => ({ code: 0 }) as Outcome,
            (e: { code: number; message: string; fieldViolations: { field: string }[] }) =>
              ({ transport, code: e.code, message: e.message, fields: e.fieldViolations.map((v) => v.field) }) as Outcome,
          )
        : await t.http("POST", `/v1/admin/accounts/${user.accountId}/plan`, { token: ADMIN_TOKEN, body: { plan: "gold" } }).then(
            (r) =>
              ({
                transport,
                code: r.body.code,
                status: r.status,
                body: r.body,
                message: r.body.message,
                fields: r.body.details.flatMap((d: { field_violations?: { field: string }[] }) => d.field_violations ?? []).map((v: { field: string }) => v.field),
              }) as Outcome,
          );
    expectFailure(outcome, Code.INVALID_ARGUMENT, 400, "plan");
    expect((await api(t, transport, user.key).account()).plan).toBe("free");
  });
});

describe("video projects", () => {
  it.each(TRANSPORTS)("%s: another account's project, an unknown id and a malformed id are NOT_FOUND", async (transport) => {
    const a = await workspace(q, 100);
    const b = await fundedAccount(q, 100);
    const created = await api(q, "grpc", a.key).createFaceSwap(a.request(0, 1));
    const stranger = api(q, transport, b.key);
    for (const outcome of [
      await stranger.get(created.body.id),
      await stranger.cancel(created.body.id),
      await stranger.delete(created.body.id),
      await stranger.get(randomUUID()),
      await stranger.get("not-a-uuid"),
    ]) {
      expectFailure(outcome, Code.NOT_FOUND, 404);
    }
    expect((await api(q, transport, a.key).get(created.body.id)).body).toMatchObject({ status: "queued", enabled: true });
  });

  it.each(TRANSPORTS)("%s: lists newest first, paged with page_size and page_token", async (transport) => {
    const w = await workspace(q, 1000);
    const client = api(q, transport, w.key);
    const ids: string[] = [];
    for (const name of ["p1", "p2", "p3"]) ids.push((await client.createFaceSwap(w.request(0, 1, { name }))).body.id);
    const first = await client.list({ page_size: 2 });
    expectOk(first);
    expect(first.body.projects.map((p: { name: string }) => p.name)).toEqual(["p3", "p2"]);
    expect(first.body.next_page_token).not.toBe("");
    const second = await client.list({ page_size: 2, page_token: first.body.next_page_token });
    expect(second.body.projects.map((p: { id: string }) => p.id)).toEqual([ids[0]]);
    expect(second.body.next_page_token).toBe("");
    const all = await client.list();
    expect(all.body.projects.map((p: { id: string }) => p.id)).toEqual([...ids].reverse());
    expect(all.body.next_page_token).toBe("");

    expectFailure(await client.list({ page_token: "garbage" }), Code.INVALID_ARGUMENT, 400, "page_token");
    expectFailure(await client.list({ page_size: -1 }), Code.INVALID_ARGUMENT, 400, "page_size");
  });

  // created_at is microseconds in PostgreSQL but a millisecond Date in JavaScript: the page token
  // carries the microseconds, or rows created later in a page's last millisecond would be skipped.
  it("pages through projects created within one millisecond without losing any", async () => {
    const w = await workspace(q, 1000);
    const client = api(q, "grpc", w.key);
    const ids: string[] = [];
    for (const name of ["m1", "m2", "m3"]) ids.push((await client.createFaceSwap(w.request(0, 1, { name }))).body.id);
    // As if three clients had queued them in the same millisecond.
    for (const [i, id] of ids.entries()) {
      await q.app.db.updateTable("faceswap_jobs").set({ created_at: sql`${`2026-01-01 00:00:00.12345${i}+00`}::timestamptz` }).where("id", "=", id).execute();
    }
    const seen: string[] = [];
    let token = "";
    do {
      const page = await client.list({ page_size: 1, page_token: token });
      seen.push(...page.body.projects.map((p: { name: string }) => p.name));
      token = page.body.next_page_token;
    } while (token !== "" && seen.length < 10);
    expect(seen).toEqual(["m3", "m2", "m1"]);
  });

  it("http: the status record has every field, error and download null until set", async () => {
    const w = await workspace(q, 100);
    const client = api(q, "http", w.key);
    const created = await client.createFaceSwap(w.request(0, 1, { name: "fields" }));
    const fields = [
      "id", "name", "status", "type", "created_at", "width", "height", "enabled", "start_seconds", "end_seconds",
      "credits_charged", "total_frame_cost", "fps", "error", "downloads", "download", "frames_rendered", "frames_total",
      "started_at", "finished_at",
    ];
    const got = await client.get(created.body.id);
    expect(Object.keys(got.body).sort()).toEqual([...fields].sort());
    expect(got.body).toMatchObject({ id: created.body.id, name: "fields", status: "queued", type: "FACE_SWAP", error: null, download: null, downloads: [] });
    expect(got.body.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
    const listed = (await client.list()).body.projects[0];
    expect(Object.keys(listed).sort()).toEqual([...fields].sort());
    const canceled = await client.cancel(created.body.id);
    expect(Object.keys(canceled.body).sort()).toEqual([...fields].sort());
    expect(canceled.body.finished_at).not.toBeNull();
  });

  it("grpc: deprecated width/height also answer a deprecation header in the initial metadata", async () => {
    const headers = await createWithRawGrpc(q, owner.key, valid({ width: 640 }));
    expect(headers.get("deprecation")).toEqual(["true"]);
    expect(String(headers.get("warning")[0])).toContain("deprecated");
  });
});

describe("auth", () => {
  describe.each(TRANSPORTS)("%s", (transport) => {
    it("refuses a call without a key (401) and a key without the faceswap scope (403)", async () => {
      const webhooksOnly = await createAccountWithKey(q, ["webhooks"]);
      for (const [key, code, status] of [
        ["", Code.UNAUTHENTICATED, 401],
        ["not-a-key-0123456789", Code.UNAUTHENTICATED, 401],
        [webhooksOnly.key, Code.PERMISSION_DENIED, 403],
      ] as const) {
        const client = api(q, transport, key);
        expectFailure(await client.createUploadUrls({ items: [{ type: "video", extension: "mp4" }] }), code, status);
        expectFailure(await client.createFaceSwap(valid()), code, status);
        expectFailure(await client.list(), code, status);
        expectFailure(await client.get(randomUUID()), code, status);
      }
    });
  });
});

/** CreateFaceSwap with grpc-js itself, to read the response's initial metadata. */
async function createWithRawGrpc(app: TestApp, key: string, request: Record<string, unknown>): Promise<Metadata> {
  const Client = makeGenericClientConstructor(FaceSwapServiceService, "faceswap.v1.FaceSwapService");
  const client = new Client(app.grpcAddress, credentials.createInsecure());
  const metadata = new Metadata();
  metadata.set("authorization", `Bearer ${key}`);
  try {
    return await new Promise<Metadata>((resolve, reject) => {
      const call = (client as unknown as Record<string, (...args: unknown[]) => { on(event: "metadata", listener: (m: Metadata) => void): void }>)
        .createFaceSwap!(CreateFaceSwapRequest.fromPartial(toCamel(request)), metadata, (error: Error | null) => {
          if (error) reject(error);
        });
      call.on("metadata", resolve);
    });
  } finally {
    client.close();
  }
}
