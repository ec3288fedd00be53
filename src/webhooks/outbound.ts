import { EventEmitter } from "node:events";
import { Agent } from "undici";
import { checkUrlSyntax, SsrfBlockedError, type SsrfGuard } from "../platform/ssrf.js";

export interface WebhookHttpClientOptions {
  guard: SsrfGuard;
  /** Bound on one whole attempt: connect, headers and body. */
  timeoutMs?: number;
  /** Bytes of the response body kept for the delivery record; the rest is never read. */
  maxResponseBytes?: number;
  connectionsPerOrigin?: number;
}

export interface PostResult {
  /** HTTP status, or 0 when no response arrived (network failure, timeout, SSRF block). */
  status: number;
  /** Whole milliseconds. */
  latencyMs: number;
  responseBody: string;
  /** The receiver's Retry-After header, if it sent one. */
  retryAfter?: string;
  error?: string;
}

/**
 * Posts webhook deliveries over keep-alive pools, one per receiver origin. Redirects are never
 * followed (a 3xx is the answer), and every connection goes to an address the guard checked.
 */
export class WebhookHttpClient {
  /** Where each URL posts to, or why it cannot: checked once per URL, not once per attempt. */
  private readonly targets = new Map<string, Target>();
  private readonly guard: SsrfGuard;
  private readonly timeoutMs: number;
  private readonly maxResponseBytes: number;
  private readonly agent: Agent;

  constructor(options: WebhookHttpClientOptions) {
    this.guard = options.guard;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxResponseBytes = options.maxResponseBytes ?? 4096;
    this.agent = new Agent({
      connections: options.connectionsPerOrigin ?? 64,
      connect: { lookup: this.guard.connectLookup() },
    });
  }

  /** Never throws: every failure comes back as status 0 with an error. */
  async post(url: string, body: string | Buffer, headers: Record<string, string>): Promise<PostResult> {
    const started = performance.now();
    const failed = (error: string): PostResult => ({ status: 0, latencyMs: elapsed(started), responseBody: "", error: storable(error) });

    const target = this.target(url);
    if ("error" in target) return failed(target.error);

    // undici takes an EventEmitter as the abort signal; an AbortController's EventTarget listeners
    // cost twice as much, on every request.
    const abort = new EventEmitter();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.emit("abort");
    }, this.timeoutMs);
    try {
      const response = await this.agent.request({
        origin: target.origin,
        path: target.path,
        method: "POST",
        headers,
        body,
        signal: abort,
      });
      // A body that says it fits is read whole, without the stream iterator the capped read needs.
      const length = Number(response.headers["content-length"] ?? Number.NaN);
      const responseBody = storable(
        length <= this.maxResponseBytes ? await response.body.text() : await readCapped(response.body, this.maxResponseBytes),
      );
      const retryAfter = response.headers["retry-after"];
      return {
        status: response.statusCode,
        latencyMs: elapsed(started),
        responseBody,
        ...(retryAfter !== undefined ? { retryAfter: String(retryAfter) } : {}),
      };
    } catch (error) {
      if (timedOut) return failed(`timeout after ${this.timeoutMs} ms`);
      return failed(describe(error));
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  private target(url: string): Target {
    let target = this.targets.get(url);
    if (target === undefined) {
      // Bounded: a replica sending to more receivers than this re-checks some URLs, nothing worse.
      if (this.targets.size >= MAX_TARGETS) this.targets.clear();
      target = checkTarget(url, this.guard);
      this.targets.set(url, target);
    }
    return target;
  }
}

const MAX_TARGETS = 10_000;

type Target = { origin: string; path: string } | { error: string };

/** The URL's syntax and literal address; a host name is checked at connect time, on every connection. */
function checkTarget(url: string, guard: SsrfGuard): Target {
  const syntax = checkUrlSyntax(url);
  if ("problem" in syntax) return { error: `invalid URL: ${syntax.detail}` };
  const blocked = guard.checkLiteralHost(syntax.url);
  if (blocked !== undefined) return { error: `blocked: ${blocked}` };
  return { origin: syntax.url.origin, path: syntax.url.pathname + syntax.url.search };
}

/** Reads at most `limit` bytes; leaving the loop early destroys the stream, which drops the connection. */
async function readCapped(body: AsyncIterable<Buffer>, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const kept = chunk.subarray(0, limit - size);
    chunks.push(kept);
    size += kept.length;
    if (size >= limit) break;
  }
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * Text as PostgreSQL's text columns take it: a receiver's answer may hold NUL, which they refuse (the
 * attempt, and every other one recorded with it, would go unrecorded). Decoding already replaced
 * invalid UTF-8.
 */
function storable(text: string): string {
  return text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text;
}

function describe(error: unknown): string {
  // Happy-eyeballs connects fail with one AggregateError carrying each address's error.
  const cause = error instanceof AggregateError && error.errors.length > 0 ? error.errors[0] : error;
  if (cause instanceof SsrfBlockedError) return `blocked: ${cause.message}`;
  if (!(cause instanceof Error)) return String(cause);
  const code = (cause as NodeJS.ErrnoException).code;
  return code === undefined || cause.message.includes(code) ? cause.message : `${code}: ${cause.message}`;
}

function elapsed(started: number): number {
  return Math.round(performance.now() - started);
}
