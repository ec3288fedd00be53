import { lookup as dnsLookup } from "node:dns/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import net from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { WebhookHttpClient } from "../src/webhooks/outbound.js";
import {
  checkUrlSyntax,
  isBlockedAddress,
  SsrfGuard,
  type LookupFn,
  type ResolvedAddress,
  type UrlProblem,
} from "../src/platform/ssrf.js";

// DNS here knows only /etc/hosts, so names under .test answer from this table and the rest
// (localhost, runsc, vm, nonexistent.invalid) go to the real resolver.
const FAKE_DNS: Record<string, ResolvedAddress[]> = {
  "public.test": [{ address: "93.184.216.34", family: 4 }],
  "public6.test": [
    { address: "2606:4700::1111", family: 6 },
    { address: "1.1.1.1", family: 4 },
  ],
  "private.test": [{ address: "10.0.0.5", family: 4 }],
  "metadata.test": [{ address: "169.254.169.254", family: 4 }],
  "mixed.test": [
    { address: "93.184.216.34", family: 4 },
    { address: "192.168.0.10", family: 4 },
  ],
  "mixed6.test": [
    { address: "2606:4700::1111", family: 6 },
    { address: "fd12:3456::1", family: 6 },
  ],
  "mapped.test": [{ address: "::ffff:127.0.0.1", family: 6 }],
  "empty.test": [],
};

const testLookup: LookupFn = async (hostname) => {
  const fake = FAKE_DNS[hostname];
  if (fake !== undefined) return fake;
  const answers = await dnsLookup(hostname, { all: true });
  return answers.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

const strict = new SsrfGuard({ allowPrivate: false, lookup: testLookup });
const permissive = new SsrfGuard({ allowPrivate: true, lookup: testLookup });

const REFUSED: [url: string, reason: UrlProblem][] = [
  // IPv4 ranges, each as a literal
  ["http://127.0.0.1/", "blocked_private"],
  ["http://127.255.255.254:8080/x", "blocked_private"],
  ["http://0.0.0.0/", "blocked_private"],
  ["http://10.0.0.1/", "blocked_private"],
  ["http://10.255.255.255/", "blocked_private"],
  ["https://10.0.0.1:8443/hook", "blocked_private"],
  ["http://100.64.0.1/", "blocked_private"],
  ["http://100.127.255.255/", "blocked_private"],
  ["http://169.254.169.254/latest/meta-data/", "blocked_private"],
  ["http://169.254.0.1/", "blocked_private"],
  ["http://172.16.0.1/", "blocked_private"],
  ["http://172.31.255.255/", "blocked_private"],
  ["http://192.0.0.8/", "blocked_private"],
  ["http://192.0.2.1/", "blocked_private"],
  ["http://192.88.99.1/", "blocked_private"],
  ["http://192.168.1.1/", "blocked_private"],
  ["http://198.18.0.1/", "blocked_private"],
  ["http://198.19.255.255/", "blocked_private"],
  ["http://198.51.100.7/", "blocked_private"],
  ["http://203.0.113.9/", "blocked_private"],
  ["http://224.0.0.1/", "blocked_private"],
  ["http://239.255.255.250/", "blocked_private"],
  ["http://240.0.0.1/", "blocked_private"],
  ["http://255.255.255.255/", "blocked_private"],
  // IPv4 spellings that WHATWG URL normalises to a dotted quad
  ["http://2130706433/", "blocked_private"],
  ["http://0177.0.0.1/", "blocked_private"],
  ["http://0x7f000001/", "blocked_private"],
  ["http://0x7f.1/", "blocked_private"],
  ["http://127.1/", "blocked_private"],
  ["http://0/", "blocked_private"],
  ["http://10.0.0.1./", "blocked_private"],
  ["http://%31%32%37.0.0.1/", "blocked_private"],
  // IPv6
  ["http://[::]/", "blocked_private"],
  ["http://[::1]/", "blocked_private"],
  ["http://[0:0:0:0:0:0:0:1]:8080/", "blocked_private"],
  ["http://[::ffff:127.0.0.1]/", "blocked_private"],
  ["http://[::ffff:7f00:1]/", "blocked_private"],
  ["http://[0:0:0:0:0:ffff:a9fe:a9fe]/", "blocked_private"],
  ["http://[::127.0.0.1]/", "blocked_private"],
  ["http://[64:ff9b::7f00:1]/", "blocked_private"],
  ["http://[64:ff9b::a00:1]/", "blocked_private"],
  ["http://[64:ff9b::808:808]/", "blocked_private"],
  ["http://[fe80::1]/", "blocked_private"],
  ["http://[fd00::1]/", "blocked_private"],
  ["http://[fc00::1]/", "blocked_private"],
  ["http://[ff02::1]/", "blocked_private"],
  ["http://[2001:db8::1]/", "blocked_private"],
  ["http://[2002:7f00:1::]/", "blocked_private"],
  ["http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "blocked_private"],
  ["http://[100::1]/", "blocked_private"],
  // names
  ["http://localhost/", "blocked_private"],
  ["http://localhost./", "blocked_private"],
  ["http://LOCALHOST:8080/", "blocked_private"],
  ["http://api.localhost/", "blocked_private"],
  ["http://runsc/", "blocked_private"],
  ["http://vm:3000/hook", "blocked_private"],
  ["http://private.test/", "blocked_private"],
  ["http://metadata.test/latest/meta-data/", "blocked_private"],
  ["http://mixed.test/", "blocked_private"],
  ["http://mixed6.test/", "blocked_private"],
  ["http://mapped.test/", "blocked_private"],
  ["http://nonexistent.invalid/", "unresolvable"],
  ["http://empty.test/", "unresolvable"],
  // shape
  ["ftp://example.com/", "invalid_url"],
  ["file:///etc/passwd", "invalid_url"],
  ["gopher://example.com:70/_GET", "invalid_url"],
  ["javascript:alert(1)", "invalid_url"],
  ["http://user:pass@example.com/", "invalid_url"],
  ["http://user@example.com/", "invalid_url"],
  ["https://:pass@example.com/", "invalid_url"],
  [`https://example.com/${"a".repeat(2000)}`, "invalid_url"],
  ["", "invalid_url"],
  ["not a url", "invalid_url"],
  ["http://", "invalid_url"],
  ["//example.com/hook", "invalid_url"],
  ["http://exa mple.com/", "invalid_url"],
  ["http://1.2.3.256/", "invalid_url"],
  ["http://[::1/", "invalid_url"],
  ["http://[fe80::1%25eth0]/", "invalid_url"],
  ["http://example.com:99999/", "invalid_url"],
  ["http://93.184.216.34:0/x", "invalid_url"],
  [" http://93.184.216.34/", "invalid_url"],
  ["http://93.184.216.34/\t", "invalid_url"],
  ["http://93.184.216.34/a\tb", "invalid_url"],
  ["http://93.184.216.34/a\nb", "invalid_url"],
];

const ALLOWED = [
  "http://93.184.216.34/",
  "https://93.184.216.34:8443/hook?x=1",
  "http://1.1.1.1/",
  "http://172.32.0.1/",
  "http://100.128.0.1/",
  "http://198.20.0.1/",
  "http://[2606:4700::1111]/",
  "http://[::ffff:93.184.216.34]/",
  "http://public.test/hook",
  "https://public6.test/",
];

describe("SsrfGuard.validate with private addresses refused", () => {
  it("has a matrix of at least 40 refused URLs", () => {
    expect(REFUSED.length).toBeGreaterThanOrEqual(40);
  });

  it.each(REFUSED)("refuses %s as %s", async (url, reason) => {
    const verdict = await strict.validate(url);
    expect(verdict).toMatchObject({ valid: false, reason });
    if (!verdict.valid) expect(verdict.detail).not.toBe("");
  });

  it.each(ALLOWED)("accepts %s", async (url) => {
    const verdict = await strict.validate(url);
    expect(verdict).toEqual({ valid: true, url: new URL(url) });
  });

  it("names the address and the range", async () => {
    expect(await strict.validate("http://mixed.test/")).toEqual({
      valid: false,
      reason: "blocked_private",
      detail: "mixed.test resolves to 192.168.0.10, a private address (private 192.168.0.0/16)",
    });
    expect(await strict.validate("http://[64:ff9b::a00:1]/")).toEqual({
      valid: false,
      reason: "blocked_private",
      detail: "64:ff9b::a00:1 is a private address (NAT64 64:ff9b::/96 to 10.0.0.1)",
    });
    expect(await strict.validate("http://0x7f.1/")).toMatchObject({
      detail: "127.0.0.1 is a private address (loopback 127.0.0.0/8)",
    });
  });

  it("uses the system resolver by default", async () => {
    const guard = new SsrfGuard({ allowPrivate: false });
    expect(await guard.validate("http://runsc/")).toMatchObject({ valid: false, reason: "blocked_private" });
    expect(await guard.validate("http://nonexistent.invalid/")).toMatchObject({ valid: false, reason: "unresolvable" });
  });
});

describe("SsrfGuard.validate with private addresses allowed", () => {
  it.each([
    "http://127.0.0.1:8080/",
    "http://[::1]/",
    "http://localhost/",
    "http://runsc:3000/",
    "http://private.test/",
    "http://mixed.test/",
  ])("accepts %s", async (url) => {
    expect(await permissive.validate(url)).toMatchObject({ valid: true });
  });

  it("still refuses bad shapes and unknown names", async () => {
    expect(await permissive.validate("ftp://127.0.0.1/")).toMatchObject({ valid: false, reason: "invalid_url" });
    expect(await permissive.validate("http://u:p@127.0.0.1/")).toMatchObject({ valid: false, reason: "invalid_url" });
    expect(await permissive.validate("http://nonexistent.invalid/")).toMatchObject({
      valid: false,
      reason: "unresolvable",
    });
  });
});

describe("checkUrlSyntax", () => {
  it.each([
    ["http://2130706433/", "127.0.0.1"],
    ["http://0177.0.0.1/", "127.0.0.1"],
    ["http://0x7f.1/", "127.0.0.1"],
    ["http://0x7f000001/", "127.0.0.1"],
    ["http://127.1/", "127.0.0.1"],
    ["http://0/", "0.0.0.0"],
    ["http://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]"],
    ["HTTP://Example.COM/", "example.com"],
  ])("normalises the host of %s to %s", (raw, host) => {
    const result = checkUrlSyntax(raw);
    expect("url" in result && result.url.hostname).toBe(host);
  });

  it("accepts 2000 characters and refuses 2001", () => {
    const base = "https://example.com/";
    expect(checkUrlSyntax(base + "a".repeat(2000 - base.length))).toHaveProperty("url");
    expect(checkUrlSyntax(base + "a".repeat(2001 - base.length))).toEqual({
      problem: "invalid_url",
      detail: "URL is longer than 2000 characters",
    });
  });

  it("measures the normalised URL too", () => {
    // Each space becomes %20 in the stored URL.
    const raw = "https://example.com/" + " x".repeat(700);
    expect(raw.length).toBeLessThanOrEqual(2000);
    expect(checkUrlSyntax(raw)).toMatchObject({ problem: "invalid_url" });
  });
});

describe("isBlockedAddress", () => {
  it.each([
    "0.1.2.3",
    "10.1.2.3",
    "100.64.0.0",
    "127.0.0.1",
    "169.254.169.254",
    "172.16.0.0",
    "172.31.255.255",
    "192.0.0.255",
    "192.0.2.0",
    "192.88.99.255",
    "192.168.255.255",
    "198.18.0.0",
    "198.19.255.255",
    "198.51.100.0",
    "203.0.113.255",
    "224.0.0.0",
    "239.255.255.255",
    "240.0.0.0",
    "255.255.255.254",
    "255.255.255.255",
    "::",
    "::1",
    "0:0:0:0:0:0:0:1",
    "::ffff:10.0.0.1",
    "::ffff:a00:1",
    "::ffff:0.0.0.0",
    "::8.8.8.8",
    "64:ff9b::8.8.8.8",
    "64:ff9b::7f00:1",
    "fc00::",
    "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "fe80::1",
    "febf::1",
    "ff02::1",
    "FF0E::1",
    "2001:db8:ffff::1",
    "2001::1",
    "2002:0808:0808::1",
    "3fff::1:2",
    "::ffff:0:7f00:1",
    "100::",
    // unparseable
    "",
    "1.2.3",
    "1.2.3.4.5",
    "01.2.3.4",
    "1.2.3.256",
    "1.2.3.-1",
    "0x7f.0.0.1",
    "localhost",
    "1::2::3",
    ":::",
    ":1::",
    "1:2:3:4:5:6:7",
    "1:2:3:4:5:6:7:8:9",
    "1:2:3:4:5:6:7::8",
    "12345::",
    "g::1",
    "1.2.3.4::",
    "::1.2.3.4:5",
    "::ffff:1.2.3",
    "fe80::1%eth0",
    "[::1]",
  ])("blocks %s", (ip) => {
    expect(isBlockedAddress(ip)).toBe(true);
  });

  it.each([
    "1.1.1.1",
    "8.8.8.8",
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "169.253.255.255",
    "169.255.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.0.1.0",
    "192.0.3.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2606:4700::1111",
    "2606:4700:0:0:0:0:0:1111",
    "2a00:1450:4001:80b::200e",
    "2001:4860:4860::8888",
    "2001:1::1",
    "2003::1",
    "::ffff:8.8.8.8",
    "::ffff:808:808",
    "0:0:0:0:0:ffff:93.184.216.34",
  ])("lets %s through", (ip) => {
    expect(isBlockedAddress(ip)).toBe(false);
  });
});

describe("SsrfGuard.connectLookup", () => {
  function lookupWith(guard: SsrfGuard, host: string, options: { all: boolean; family?: number }) {
    return new Promise<{ error: NodeJS.ErrnoException | null; address: unknown; family: unknown }>((resolve) => {
      guard.connectLookup()(host, options, (error, address, family) => resolve({ error, address, family }));
    });
  }

  it("answers every checked address when asked for all", async () => {
    expect(await lookupWith(strict, "public6.test", { all: true })).toEqual({
      error: null,
      address: FAKE_DNS["public6.test"],
      family: undefined,
    });
  });

  it("answers one address when not asked for all, honouring the family", async () => {
    expect(await lookupWith(strict, "public6.test", { all: false })).toEqual({
      error: null,
      address: "2606:4700::1111",
      family: 6,
    });
    expect(await lookupWith(strict, "public6.test", { all: false, family: 4 })).toEqual({
      error: null,
      address: "1.1.1.1",
      family: 4,
    });
    const none = await lookupWith(strict, "public.test", { all: true, family: 6 });
    expect(none.error?.code).toBe("ENOTFOUND");
  });

  it("fails with ESSRFBLOCKED when any answer is private", async () => {
    for (const host of ["mixed.test", "private.test", "localhost", "runsc", "127.0.0.1", "::1"]) {
      const { error } = await lookupWith(strict, host, { all: true });
      expect(error?.code, host).toBe("ESSRFBLOCKED");
    }
    expect((await lookupWith(permissive, "runsc", { all: true })).address).toEqual([
      { address: "127.0.0.1", family: 4 },
    ]);
  });

  it("passes resolver failures through", async () => {
    const { error } = await lookupWith(strict, "nonexistent.invalid", { all: true });
    expect(error?.code).toBe("ENOTFOUND");
  });
});

interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

interface Receiver {
  port: number;
  requests: Received[];
  /** TCP connections accepted, whether or not a request followed. */
  connections: number;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const requests: Received[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) });
      switch (req.url) {
        case "/redirect":
          res.writeHead(302, { location: `http://127.0.0.1:${receiver.port}/target` }).end();
          break;
        case "/fail":
          res.writeHead(500).end("boom");
          break;
        case "/never":
          break;
        case "/stall":
          res.writeHead(200, { "content-length": "100" });
          res.write("partial");
          break;
        case "/big":
          res.writeHead(200).end("é".repeat(50_000));
          break;
        default:
          res.writeHead(200).end("received");
      }
    });
  });
  const receiver: Receiver = {
    port: 0,
    requests,
    connections: 0,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  server.on("connection", () => receiver.connections++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  receiver.port = (server.address() as AddressInfo).port;
  return receiver;
}

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("WebhookHttpClient against loopback receivers", () => {
  let receiver: Receiver;
  let client: WebhookHttpClient;
  const clients: WebhookHttpClient[] = [];
  const receivers: Receiver[] = [];

  function newClient(options: Partial<ConstructorParameters<typeof WebhookHttpClient>[0]> = {}): WebhookHttpClient {
    const created = new WebhookHttpClient({ guard: permissive, timeoutMs: 300, ...options });
    clients.push(created);
    return created;
  }

  async function newReceiver(): Promise<Receiver> {
    const created = await startReceiver();
    receivers.push(created);
    return created;
  }

  beforeAll(async () => {
    receiver = await newReceiver();
    client = newClient();
  });
  afterEach(() => {
    receiver.requests.length = 0;
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(receivers.map((r) => r.close()));
  });

  it("posts the exact bytes and headers", async () => {
    const body = Buffer.concat([Buffer.from('{"event":"test.ping","n":"\u00e9"}'), Buffer.from([0x00, 0xff, 0xfe, 0x0a])]);
    const headers = {
      "Content-Type": "application/json",
      "User-Agent": "Service-Webhook/1.0",
      "X-Webhook-Event": "test.ping",
      "X-Webhook-Timestamp": "2026-11-21T02:00:00.000Z",
      "X-Webhook-Signature": "sha256=" + "ab".repeat(32),
    };
    const result = await client.post(`http://127.0.0.1:${receiver.port}/hooks/in?a=1&b=2`, body, headers);
    expect(result).toMatchObject({ status: 200, responseBody: "received" });
    expect(result.error).toBeUndefined();
    expect(result.latencyMs).toBeGreaterThanOrEqual(0);
    const [received] = receiver.requests;
    expect(received?.method).toBe("POST");
    expect(received?.url).toBe("/hooks/in?a=1&b=2");
    expect(received?.body.equals(body)).toBe(true);
    expect(received?.headers).toMatchObject({
      "content-type": "application/json",
      "user-agent": "Service-Webhook/1.0",
      "x-webhook-event": "test.ping",
      "x-webhook-timestamp": "2026-11-21T02:00:00.000Z",
      "x-webhook-signature": "sha256=" + "ab".repeat(32),
      "content-length": String(body.length),
    });
  });

  it("posts a string body as UTF-8", async () => {
    await client.post(`http://127.0.0.1:${receiver.port}/`, '{"x":"\u00fc\u2603"}', {});
    expect(receiver.requests[0]?.body.toString("utf8")).toBe('{"x":"\u00fc\u2603"}');
  });

  it("reuses a kept-alive connection per origin", async () => {
    const own = await newReceiver();
    for (let i = 0; i < 10; i++) {
      expect((await client.post(`http://127.0.0.1:${own.port}/`, "{}", {})).status).toBe(200);
    }
    // undici may open a second socket while the first is still settling; it never opens one per request.
    expect(own.connections).toBeLessThanOrEqual(2);
  });

  it("connects to a name through the guard's lookup", async () => {
    const named = newClient({
      guard: new SsrfGuard({ allowPrivate: true, lookup: async () => [{ address: "127.0.0.1", family: 4 }] }),
    });
    const result = await named.post(`http://hooks.example.test:${receiver.port}/named`, "{}", {});
    expect(result.status).toBe(200);
    expect(receiver.requests[0]?.headers.host).toBe(`hooks.example.test:${receiver.port}`);
  });

  it("returns a 302 as is and never requests the Location", async () => {
    const result = await client.post(`http://127.0.0.1:${receiver.port}/redirect`, "{}", {});
    expect(result).toMatchObject({ status: 302, responseBody: "" });
    await sleep(100);
    expect(receiver.requests.map((r) => r.url)).toEqual(["/redirect"]);
  });

  it("returns a 500 with its body", async () => {
    const result = await client.post(`http://127.0.0.1:${receiver.port}/fail`, "{}", {});
    expect(result).toMatchObject({ status: 500, responseBody: "boom" });
    expect(result.error).toBeUndefined();
  });

  it("times out a receiver that never answers", async () => {
    const result = await client.post(`http://127.0.0.1:${receiver.port}/never`, "{}", {});
    expect(result).toMatchObject({ status: 0, responseBody: "", error: "timeout after 300 ms" });
    expect(result.latencyMs).toBeGreaterThanOrEqual(290);
    expect(result.latencyMs).toBeLessThan(1300);
  });

  it("times out a receiver that stalls in the body", async () => {
    const result = await client.post(`http://127.0.0.1:${receiver.port}/stall`, "{}", {});
    expect(result).toMatchObject({ status: 0, error: "timeout after 300 ms" });
    expect(result.latencyMs).toBeGreaterThanOrEqual(290);
    expect(result.latencyMs).toBeLessThan(1300);
  });

  it("keeps at most maxResponseBytes of the response body", async () => {
    const result = await client.post(`http://127.0.0.1:${receiver.port}/big`, "{}", {});
    expect(result.status).toBe(200);
    // 4096 bytes of two-byte characters: 2048 of them.
    expect(result.responseBody).toBe("é".repeat(2048));

    const small = newClient({ maxResponseBytes: 10 });
    expect((await small.post(`http://127.0.0.1:${receiver.port}/big`, "{}", {})).responseBody).toBe("é".repeat(5));
    // The connection whose body was abandoned is gone, not poisoning the pool.
    expect((await small.post(`http://127.0.0.1:${receiver.port}/`, "{}", {})).responseBody).toBe("received");
  });

  it("reports a refused connection as status 0", async () => {
    const port = await closedPort();
    const result = await client.post(`http://127.0.0.1:${port}/`, "{}", {});
    expect(result).toMatchObject({ status: 0, responseBody: "" });
    expect(result.error).toMatch(/ECONNREFUSED/);
  });

  it("never throws on a bad URL or header", async () => {
    expect(await client.post("ftp://127.0.0.1/", "{}", {})).toMatchObject({
      status: 0,
      error: expect.stringMatching(/^invalid URL: scheme ftp:/),
    });
    const badHeader = await client.post(`http://127.0.0.1:${receiver.port}/`, "{}", { "X-Bad": "a\r\nInjected: 1" });
    expect(badHeader.status).toBe(0);
    expect(badHeader.error).toBeTruthy();
    expect(receiver.requests).toEqual([]);
  });

  it("refuses private targets when they are not allowed, before any connection", async () => {
    const own = await newReceiver();
    const guarded = newClient({ guard: strict });
    for (const host of ["127.0.0.1", "[::ffff:127.0.0.1]", "localhost", "runsc"]) {
      const result = await guarded.post(`http://${host}:${own.port}/`, "{}", {});
      expect(result, host).toMatchObject({ status: 0, responseBody: "", error: expect.stringMatching(/^blocked: /) });
    }
    expect((await guarded.post(`http://127.0.0.1:${own.port}/`, "{}", {})).error).toBe(
      "blocked: 127.0.0.1 is a private address (loopback 127.0.0.0/8)",
    );
    await sleep(50);
    expect(own.connections).toBe(0);
    expect(own.requests).toEqual([]);
  });

  it("gives DNS rebinding no window: the name is resolved again and checked at connect", async () => {
    const own = await newReceiver();
    let calls = 0;
    const rebinding: LookupFn = async () => {
      calls++;
      return calls === 1 ? [{ address: "93.184.216.34", family: 4 }] : [{ address: "127.0.0.1", family: 4 }];
    };
    const guard = new SsrfGuard({ allowPrivate: false, lookup: rebinding });
    const url = `http://rebind.test:${own.port}/`;
    expect(await guard.validate(url)).toMatchObject({ valid: true });

    // A plain socket using the guard's lookup, as undici's connector does.
    const error = await new Promise<NodeJS.ErrnoException>((resolve, reject) => {
      const socket = net.connect({ host: "rebind.test", port: own.port, lookup: guard.connectLookup() });
      socket.on("connect", () => {
        socket.destroy();
        reject(new Error("connected to loopback"));
      });
      socket.on("error", resolve);
    });
    expect(error.code).toBe("ESSRFBLOCKED");

    calls = 0;
    expect(await guard.validate(url)).toMatchObject({ valid: true });
    const result = await newClient({ guard }).post(url, "{}", {});
    expect(result).toMatchObject({
      status: 0,
      error: "blocked: rebind.test resolves to 127.0.0.1, a private address (loopback 127.0.0.0/8)",
    });
    expect(calls).toBe(2);
    await sleep(50);
    expect(own.connections).toBe(0);
  });
});
