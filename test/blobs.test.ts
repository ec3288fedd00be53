import { randomBytes, randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import fs from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { BlobTooLargeError, type BlobStore } from "../src/platform/blobs/blob-store.js";
import { LocalBlobStore } from "../src/platform/blobs/local-blob-store.js";
import { S3BlobStore } from "../src/platform/blobs/s3-blob-store.js";
import { parseRange } from "../src/transport/http/blob-routes.js";
import { recordingLogger } from "./support/logs.js";
import { startS3Server, type S3Server } from "./support/s3.js";

const BUCKET = "blobs-test";
const MiB = 1024 * 1024;

let s3: S3Server;
let s3Endpoint: string;

beforeAll(async () => {
  s3 = await startS3Server(BUCKET);
  s3Endpoint = s3.endpoint;
});

afterAll(async () => {
  await s3?.stop();
});

const tempDirs: string[] = [];

async function tempDir(name: string): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), `blobs-${name}-`));
  tempDirs.push(dir);
  return dir;
}

afterEach(async () => {
  await Promise.all(tempDirs.splice(0).map((dir) => fs.rm(dir, { recursive: true, force: true })));
});

interface Fixture {
  store: BlobStore;
  /** Spool and partial files the store left behind on disk. */
  leftovers(): Promise<string[]>;
}

async function s3Store(
  prefix = `t-${randomUUID()}`,
  endpoint = s3Endpoint,
): Promise<{ store: S3BlobStore; scratch: string; logs: Record<string, unknown>[] }> {
  const scratch = await tempDir("s3-scratch");
  const { logger, logs } = recordingLogger("warn");
  const store = new S3BlobStore({ bucket: BUCKET, region: "us-east-1", endpoint, forcePathStyle: true, prefix, tempDir: scratch, logger });
  return { store, scratch, logs };
}

interface Implementation {
  name: string;
  make(): Promise<Fixture>;
  copiesAreTemporary: boolean;
  presigns: boolean;
  /** s3rver 3.7.1 reads `bytes=0-0` as `bytes=0-` (its `end || Infinity`); AWS S3 serves the one byte. */
  zeroEndRangeIsWhole: boolean;
}

const implementations: Implementation[] = [
  {
    name: "LocalBlobStore",
    async make() {
      const root = await tempDir("local");
      const leftovers = async () => (await fs.readdir(root, { recursive: true })).filter((entry) => entry.endsWith(".part"));
      return { store: new LocalBlobStore(root), leftovers };
    },
    copiesAreTemporary: false,
    presigns: false,
    zeroEndRangeIsWhole: false,
  },
  {
    name: "S3BlobStore (s3rver)",
    async make() {
      const { store, scratch } = await s3Store();
      return { store, leftovers: () => fs.readdir(scratch, { recursive: true }) };
    },
    copiesAreTemporary: true,
    presigns: true,
    zeroEndRangeIsWhole: true,
  },
];

/** Streams `bytes` in chunks, as an upload arrives. */
function streamOf(bytes: Buffer, chunkSize = 64 * 1024): Readable {
  return Readable.from(
    (function* () {
      for (let offset = 0; offset < bytes.length; offset += chunkSize) yield bytes.subarray(offset, offset + chunkSize);
    })(),
  );
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describe.each(implementations)("$name", ({ make, copiesAreTemporary, presigns, zeroEndRangeIsWhole }) => {
  it("stores a multi-MiB stream and reads it back", async () => {
    const { store, leftovers } = await make();
    const bytes = randomBytes(5 * MiB + 123);
    expect(await store.put("uploads/a/video.mp4", streamOf(bytes), { maxBytes: 6 * MiB, contentType: "video/mp4" })).toEqual({ size: bytes.length });
    expect(await store.stat("uploads/a/video.mp4")).toEqual({ size: bytes.length });
    expect((await readAll(await store.read("uploads/a/video.mp4"))).equals(bytes)).toBe(true);
    expect(await leftovers()).toEqual([]);
  });

  it("accepts a body of exactly maxBytes and an empty one", async () => {
    const { store } = await make();
    const bytes = randomBytes(1000);
    expect(await store.put("exact.bin", streamOf(bytes, 100), { maxBytes: 1000 })).toEqual({ size: 1000 });
    expect(await store.put("empty.bin", streamOf(Buffer.alloc(0)), { maxBytes: 1000 })).toEqual({ size: 0 });
    expect(await store.stat("empty.bin")).toEqual({ size: 0 });
  });

  it("refuses a body past maxBytes and leaves nothing behind", async () => {
    const { store, leftovers } = await make();
    const put = store.put("uploads/big.mp4", streamOf(randomBytes(2 * MiB)), { maxBytes: MiB });
    await expect(put).rejects.toBeInstanceOf(BlobTooLargeError);
    await expect(put).rejects.toMatchObject({ maxBytes: MiB });
    expect(await store.stat("uploads/big.mp4")).toBeUndefined();
    expect(await leftovers()).toEqual([]);
  });

  it("keeps the previous blob when a replacing put fails", async () => {
    const { store } = await make();
    const original = randomBytes(100);
    await store.put("clip.mp4", streamOf(original), { maxBytes: 1000 });
    await expect(store.put("clip.mp4", streamOf(randomBytes(2000)), { maxBytes: 1000 })).rejects.toBeInstanceOf(BlobTooLargeError);
    expect((await readAll(await store.read("clip.mp4"))).equals(original)).toBe(true);
  });

  it("stores a local file", async () => {
    const { store } = await make();
    const bytes = randomBytes(300_000);
    const file = path.join(await tempDir("source"), "out.mp4");
    await fs.writeFile(file, bytes);
    expect(await store.putFile("outputs/out.mp4", file, "video/mp4")).toEqual({ size: bytes.length });
    expect((await readAll(await store.read("outputs/out.mp4"))).equals(bytes)).toBe(true);
    expect(existsSync(file)).toBe(true);
  });

  it("reads byte ranges", async () => {
    const { store } = await make();
    const bytes = randomBytes(300_000);
    await store.put("ranged.bin", streamOf(bytes), { maxBytes: MiB });
    const range = async (start: number, end: number) => readAll(await store.read("ranged.bin", { start, end }));
    expect((await range(0, 0)).equals(zeroEndRangeIsWhole ? bytes : bytes.subarray(0, 1))).toBe(true);
    expect((await range(0, 1)).equals(bytes.subarray(0, 2))).toBe(true);
    expect((await range(1000, 200_000)).equals(bytes.subarray(1000, 200_001))).toBe(true);
    expect((await range(bytes.length - 1, bytes.length - 1)).equals(bytes.subarray(-1))).toBe(true);
  });

  it("answers undefined for a missing blob and rejects reading it", async () => {
    const { store, leftovers } = await make();
    expect(await store.stat("nothing/here.mp4")).toBeUndefined();
    await expect(store.read("nothing/here.mp4")).rejects.toThrow();
    await expect(store.localCopy("nothing/here.mp4")).rejects.toThrow();
    expect(await leftovers()).toEqual([]);
  });

  it("refuses keys that are not blob keys", async () => {
    const { store } = await make();
    await expect(store.stat("../escape")).rejects.toThrow(/not a blob key/);
    await expect(store.put("a//b", streamOf(Buffer.from("x")), { maxBytes: 10 })).rejects.toThrow(/not a blob key/);
    await expect(store.delete(["ok", ".hidden"])).rejects.toThrow(/not a blob key/);
  });

  it("makes a local copy", async () => {
    const { store, leftovers } = await make();
    const bytes = randomBytes(400_000);
    await store.put("jobs/1/source.mov", streamOf(bytes), { maxBytes: MiB });
    const copy = await store.localCopy("jobs/1/source.mov");
    expect(path.basename(copy.path)).toBe("source.mov");
    expect((await fs.readFile(copy.path)).equals(bytes)).toBe(true);
    await copy.release();
    expect(existsSync(copy.path)).toBe(!copiesAreTemporary);
    expect(await store.stat("jobs/1/source.mov")).toEqual({ size: bytes.length });
    expect(await leftovers()).toEqual([]);
  });

  it("deletes blobs, ignoring missing ones", async () => {
    const { store } = await make();
    await store.put("d/one.bin", streamOf(Buffer.from("one")), { maxBytes: 10 });
    await store.put("d/two.bin", streamOf(Buffer.from("two")), { maxBytes: 10 });
    await store.delete(["d/one.bin", "d/missing.bin", "never/was.bin"]);
    await store.delete([]);
    expect(await store.stat("d/one.bin")).toBeUndefined();
    expect(await store.stat("d/two.bin")).toEqual({ size: 3 });
  });

  it("deletes a prefix and nothing else", async () => {
    const { store } = await make();
    const keys = ["acct/1/a.mp4", "acct/1/b/c.mp4", "acct/10/a.mp4", "acct/2/a.mp4", "other/1/a.mp4"];
    for (const key of keys) await store.put(key, streamOf(Buffer.from(key)), { maxBytes: 100 });
    await store.deletePrefix("acct/1");
    await store.deletePrefix("not/there");
    const left = await Promise.all(keys.map(async (key) => [key, (await store.stat(key)) !== undefined]));
    expect(Object.fromEntries(left)).toEqual({
      "acct/1/a.mp4": false,
      "acct/1/b/c.mp4": false,
      "acct/10/a.mp4": true,
      "acct/2/a.mp4": true,
      "other/1/a.mp4": true,
    });
  });

  it(presigns ? "presigns a download URL that serves the bytes and ranges" : "has no presigned URLs", async () => {
    const { store } = await make();
    const bytes = randomBytes(200_000);
    await store.put("outputs/9/result.mp4", streamOf(bytes), { maxBytes: MiB, contentType: "video/mp4" });
    const url = await store.presignedDownloadUrl("outputs/9/result.mp4", 300);
    if (!presigns) {
      expect(url).toBeUndefined();
      return;
    }
    expect(url).toBeDefined();
    const whole = await fetch(url!);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("content-disposition")).toBe('attachment; filename="result.mp4"');
    expect(whole.headers.get("content-type")).toBe("video/mp4");
    expect(Buffer.from(await whole.arrayBuffer()).equals(bytes)).toBe(true);
    const part = await fetch(url!, { headers: { range: "bytes=100-199" } });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe(`bytes 100-199/${bytes.length}`);
    expect(Buffer.from(await part.arrayBuffer()).equals(bytes.subarray(100, 200))).toBe(true);
  });
});

describe("S3BlobStore prefixes", () => {
  it("keeps each store's blobs under its prefix", async () => {
    const prefix = `p-${randomUUID()}`;
    const { store: scoped } = await s3Store(`/${prefix}/`);
    const { store: other } = await s3Store();
    const { store: root } = await s3Store("");
    await scoped.put("k/blob.bin", streamOf(Buffer.from("scoped")), { maxBytes: 100 });
    expect(await other.stat("k/blob.bin")).toBeUndefined();
    expect(await root.stat(`${prefix}/k/blob.bin`)).toEqual({ size: 6 });
    await root.deletePrefix(prefix);
    expect(await scoped.stat("k/blob.bin")).toBeUndefined();
  });
});

/**
 * A TCP proxy to the S3 server that cuts the connection of each of the next `drops` requests of
 * `method` once 64 KiB of its body (a PUT's, sent; a GET's, received) have gone through, as a network
 * fault or a restarting load balancer would.
 */
async function droppingProxy(method: "PUT" | "GET", drops: number): Promise<{ endpoint: string; close(): Promise<void> }> {
  const target = new URL(s3Endpoint);
  let left = drops;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
    }
    const cut = () => {
      client.destroy();
      upstream.destroy();
    };
    // Bytes through so far and where to cut, each way: [client to server, server to client].
    const through = [0, 0], cutAt = [Infinity, Infinity];
    const forward = (from: net.Socket, to: net.Socket, way: 0 | 1) =>
      from.on("data", (chunk: Buffer) => {
        if (way === 0 && left > 0 && chunk.subarray(0, method.length + 1).toString("latin1") === `${method} `) {
          left--;
          cutAt[method === "PUT" ? 0 : 1] = through[method === "PUT" ? 0 : 1]! + 64 * 1024;
        }
        to.write(chunk);
        through[way]! += chunk.length;
        if (through[way]! >= cutAt[way]!) cut();
      });
    forward(client, upstream, 0);
    forward(upstream, client, 1);
    client.on("close", cut);
    upstream.on("close", cut);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("S3BlobStore over a failing network", () => {
  const bytes = randomBytes(2 * MiB);

  it("sends an upload again from the start when its connection drops", async () => {
    const proxy = await droppingProxy("PUT", 2);
    const warn = vi.spyOn(console, "warn");
    try {
      const { store, scratch, logs } = await s3Store(undefined, proxy.endpoint);
      expect(await store.put("k/video.mp4", streamOf(bytes), { maxBytes: 4 * MiB })).toEqual({ size: bytes.length });
      expect((await readAll(await store.read("k/video.mp4"))).equals(bytes)).toBe(true);
      expect(logs.filter((line) => line.event === "s3_upload_retry").map((line) => line.attempt)).toEqual([1, 2]);
      expect(await fs.readdir(scratch, { recursive: true })).toEqual([]);
      // The SDK's own warning comes as a log line too, not as plain text on the console.
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
      await proxy.close();
    }
  });

  // s3rver keeps the part of a cut upload it received (S3 stores nothing), so only the store's
  // own account of the failure is checked here.
  it("gives up after three tries and leaves no spool behind", async () => {
    const proxy = await droppingProxy("PUT", 3);
    try {
      const { store, scratch, logs } = await s3Store(undefined, proxy.endpoint);
      await expect(store.put("k/video.mp4", streamOf(bytes), { maxBytes: 4 * MiB })).rejects.toMatchObject({ code: "ECONNRESET" });
      expect(logs.filter((line) => line.event === "s3_upload_retry")).toHaveLength(2);
      expect(await fs.readdir(scratch, { recursive: true })).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it("fetches a local copy again when its download is cut off", async () => {
    const prefix = `t-${randomUUID()}`;
    const { store: direct } = await s3Store(prefix);
    await direct.put("k/video.mp4", streamOf(bytes), { maxBytes: 4 * MiB });
    const proxy = await droppingProxy("GET", 2);
    try {
      const { store, logs } = await s3Store(prefix, proxy.endpoint);
      const copy = await store.localCopy("k/video.mp4");
      try {
        expect((await fs.readFile(copy.path)).equals(bytes)).toBe(true);
      } finally {
        await copy.release();
      }
      expect(logs.filter((line) => line.event === "s3_download_retry").map((line) => line.attempt)).toEqual([1, 2]);
    } finally {
      await proxy.close();
    }
  });

  it("does not send again an upload the server refused", async () => {
    const { logger, logs } = recordingLogger("warn");
    const missingBucket = new S3BlobStore({
      bucket: "no-such-bucket",
      region: "us-east-1",
      endpoint: s3Endpoint,
      forcePathStyle: true,
      prefix: "",
      tempDir: await tempDir("s3-scratch"),
      logger,
    });
    // Small enough to be sent whole before the server answers: s3rver closes the connection on its
    // refusal, and a larger body meets the closed socket first.
    await expect(missingBucket.put("k/video.mp4", streamOf(bytes.subarray(0, 1024)), { maxBytes: 4 * MiB })).rejects.toThrow(/bucket/i);
    expect(logs.filter((line) => line.event === "s3_upload_retry")).toEqual([]);
  });
});

describe("parseRange", () => {
  it.each([
    ["bytes=0-0", { start: 0, end: 0 }],
    ["bytes=5-", { start: 5, end: 99 }],
    ["bytes=-3", { start: 97, end: 99 }],
    ["bytes=-500", { start: 0, end: 99 }],
    ["bytes=90-500", { start: 90, end: 99 }],
    [" bytes=1-2 ", { start: 1, end: 2 }],
    ["bytes=10-5", undefined],
    ["bytes=100-", null],
    ["bytes=150-200", null],
    ["bytes=-0", null],
    ["bytes=-", undefined],
    ["bytes=a-b", undefined],
    ["bytes=0-1,5-6", undefined],
    ["items=0-1", undefined],
    ["garbage", undefined],
  ])("%s of 100 bytes gives %o", (header, expected) => {
    expect(parseRange(header, 100)).toEqual(expected);
  });

  it("cannot satisfy any range of an empty blob", () => {
    expect(parseRange("bytes=0-", 0)).toBeNull();
    expect(parseRange("bytes=-1", 0)).toBeNull();
  });
});
