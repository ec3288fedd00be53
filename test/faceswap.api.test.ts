import { randomBytes, randomUUID } from "node:crypto";
import fs from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { UrlSigner } from "../src/platform/blobs/signed-urls.js";
import { runFfmpeg } from "../src/platform/media/ffmpeg.js";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { api, expectFailure, expectOk, fundedAccount, TRANSPORTS, uploadFile } from "./support/faceswap.js";
import { makeClip, samplePhoto } from "./support/footage.js";

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
/** A 16x16 PNG, small enough for q's image limit. */
let tinyPng: string;

/** An account on q with uploads: what the rule tests reference. */
interface Uploads {
  video: string;
  image: string;
  garbage: string;
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
    runFfmpeg(["-y", "-loglevel", "error", "-f", "lavfi", "-i", "color=c=red:s=16x16", "-frames:v", "1", path.join(dir, "tiny.png")]),
  ]);
  [t, q, [clip]] = await Promise.all([
    createTestDatabase().then((db) => startTestApp(db, { ...env, DATA_DIR: path.join(dir, "t-data") })),
    createTestDatabase().then((db) =>
      startTestApp(db, {
        ...env,
        DATA_DIR: path.join(dir, "q-data"),
        RENDER_CONCURRENCY: "0",
        WEBHOOK_ALLOW_PRIVATE: "false",
        UPLOAD_MAX_IMAGE_BYTES: String(IMAGE_LIMIT),
      }),
    ),
    footage,
  ]);
  tinyPng = path.join(dir, "tiny.png");

  // Serves the clip for URL inputs.
  files = http.createServer((req, res) => {
    if (req.url === "/clip.mp4") {
      void fs.readFile(clip).then((bytes) => res.writeHead(200, { "content-type": "video/mp4" }).end(bytes));
    } else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => files.listen(0, "127.0.0.1", resolve));
  filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;

  owner = await fundedAccount(q, 1_000_000);
  const stranger = await fundedAccount(q, 1_000_000);
  const [video, image, garbage, foreign] = await Promise.all([
    uploadFile(q, owner.key, "video", "mp4", clip),
    uploadFile(q, owner.key, "image", "png", tinyPng),
    uploadFile(q, owner.key, "video", "mp4", randomBytes(4096)),
    uploadFile(q, stranger.key, "video", "mp4", clip),
  ]);
  mine = { video, image, garbage };
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
    ["start_seconds at the video's end", () => valid({ start_seconds: 2, end_seconds: 3 }), "start_seconds"],
    ["start_seconds beyond the video's end", () => valid({ start_seconds: 5, end_seconds: 6 }), "start_seconds"],
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

