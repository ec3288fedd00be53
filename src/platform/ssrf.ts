import { lookup as dnsLookup } from "node:dns/promises";
import type { LookupFunction } from "node:net";

/** Why a webhook URL is refused; the validate-url endpoint sends these words as its `reason`. */
export type UrlProblem = "invalid_url" | "blocked_private" | "unresolvable";

const MAX_URL_LENGTH = 2000;

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has. */
export type LookupFn = (hostname: string) => Promise<ResolvedAddress[]>;

export interface SsrfGuardOptions {
  /** Let private, loopback and other non-public addresses through (tests, local setups). */
  allowPrivate: boolean;
  lookup?: LookupFn;
}

export type UrlVerdict = { valid: true; url: URL } | { valid: false; reason: UrlProblem; detail: string };

/** What a connection refused by the guard fails with, so callers can tell it from network errors. */
export class SsrfBlockedError extends Error {
  readonly code = "ESSRFBLOCKED";

  constructor(message: string) {
    super(message);
    this.name = "SsrfBlockedError";
  }
}

/** Only the shape of the URL: scheme, credentials, length, host. No DNS. */
export function checkUrlSyntax(raw: string): { url: URL } | { problem: "invalid_url"; detail: string } {
  const invalid = (detail: string) => ({ problem: "invalid_url" as const, detail });
  if (raw.length > MAX_URL_LENGTH) return invalid(`URL is longer than ${MAX_URL_LENGTH} characters`);
  // The parser would drop them, and the URL stored and shown would not be the one sent to.
  if (raw.trim() !== raw) return invalid("URL has spaces or control characters before or after it");
  if (/[\t\n\r]/.test(raw)) return invalid("URL holds a tab or a line break");
  const url = URL.parse(raw);
  if (url === null) return invalid("not a valid absolute URL");
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return invalid(`scheme ${url.protocol} is not allowed; use http or https`);
  }
  if (url.username !== "" || url.password !== "") return invalid("URL must not contain credentials");
  if (url.hostname === "") return invalid("URL has no host");
  if (url.port === "0") return invalid("port 0 cannot be connected to");
  // Normalisation (percent-encoding, IDNA) can lengthen what is stored and sent.
  if (url.href.length > MAX_URL_LENGTH) return invalid(`URL is longer than ${MAX_URL_LENGTH} characters once percent-encoded`);
  return { url };
}

/** True for every address a webhook must not reach; anything that does not parse as an IP is blocked too. */
export function isBlockedAddress(ip: string): boolean {
  return blockedRange(ip) !== undefined;
}

/**
 * Resolves, checks every answer and hands out only checked addresses, both to `validate` and to the
 * socket's own lookup, so what was checked is what gets connected to.
 */
export class SsrfGuard {
  private readonly allowPrivate: boolean;
  private readonly lookup: LookupFn;

  constructor(options: SsrfGuardOptions) {
    this.allowPrivate = options.allowPrivate;
    this.lookup = options.lookup ?? systemLookup;
  }

  async validate(raw: string): Promise<UrlVerdict> {
    const syntax = checkUrlSyntax(raw);
    if ("problem" in syntax) return { valid: false, reason: syntax.problem, detail: syntax.detail };
    try {
      await this.resolveChecked(syntax.url.hostname);
    } catch (error) {
      if (error instanceof SsrfBlockedError) return { valid: false, reason: "blocked_private", detail: error.message };
      return { valid: false, reason: "unresolvable", detail: unresolvableDetail(syntax.url.hostname, error) };
    }
    return { valid: true, url: syntax.url };
  }

  /**
   * Why a literal-IP host is refused, or undefined when it may be connected to. Sockets skip the lookup
   * for literal IPs, so callers check them with this first; host names are left to `connectLookup`.
   */
  checkLiteralHost(url: URL): string | undefined {
    const ip = literalAddress(url.hostname);
    if (ip === undefined || this.allowPrivate) return undefined;
    const range = blockedRange(ip);
    return range === undefined ? undefined : `${ip} is a private address (${range})`;
  }

  /** A `lookup` for net.connect (undici's `connect.lookup`) that answers only checked addresses. */
  connectLookup(): LookupFunction {
    return (hostname, options, callback) => {
      this.resolveChecked(hostname).then(
        (resolved) => {
          const wanted = familyNumber(options.family);
          const addresses = wanted === 0 ? resolved : resolved.filter((a) => a.family === wanted);
          const first = addresses[0];
          if (first === undefined) {
            callback(errorWithCode(`${hostname} has no IPv${wanted} address`, "ENOTFOUND"), "");
          } else if (options.all) {
            callback(null, addresses);
          } else {
            callback(null, first.address, first.family);
          }
        },
        (error: NodeJS.ErrnoException) => callback(error, ""),
      );
    };
  }

  /** Throws SsrfBlockedError when any answer is blocked: an attacker controls which one gets used. */
  private async resolveChecked(host: string): Promise<ResolvedAddress[]> {
    const ip = literalAddress(host);
    if (ip !== undefined) {
      const parsed = parseIp(ip);
      if (parsed === undefined) throw new SsrfBlockedError(`${ip} is not an IP address`);
      const range = this.allowPrivate ? undefined : blockedRange(ip);
      if (range !== undefined) throw new SsrfBlockedError(`${ip} is a private address (${range})`);
      return [{ address: ip, family: parsed.family }];
    }
    // RFC 6761 lets applications treat localhost names as loopback without asking DNS, which may not know `localhost.`.
    if (!this.allowPrivate && isLocalhostName(host)) throw new SsrfBlockedError(`${host} is a loopback name`);
    const answers = await this.lookup(host);
    if (answers.length === 0) throw errorWithCode(`${host} has no addresses`, "ENOTFOUND");
    if (!this.allowPrivate) {
      for (const { address } of answers) {
        const range = blockedRange(address);
        if (range !== undefined) {
          throw new SsrfBlockedError(`${host} resolves to ${address}, a private address (${range})`);
        }
      }
    }
    return answers;
  }
}

async function systemLookup(hostname: string): Promise<ResolvedAddress[]> {
  const answers = await dnsLookup(hostname, { all: true, order: "verbatim" });
  return answers.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
}

function unresolvableDetail(host: string, error: unknown): string {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === undefined ? `${host} could not be resolved` : `${host} could not be resolved (${code})`;
}

function errorWithCode(message: string, code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(message), { code });
}

function familyNumber(family: number | string | undefined): 0 | 4 | 6 {
  if (family === 4 || family === "IPv4") return 4;
  if (family === 6 || family === "IPv6") return 6;
  return 0;
}

function isLocalhostName(host: string): boolean {
  const name = (host.endsWith(".") ? host.slice(0, -1) : host).toLowerCase();
  return name === "localhost" || name.endsWith(".localhost");
}

/**
 * The IP of a literal host, brackets removed, or undefined for a name. WHATWG URL has already
 * rewritten decimal, octal, hex and short IPv4 forms into dotted quads, and a host ending in a
 * number that is not a valid IPv4 never parses, so dotted quads are the only IPv4 form left.
 */
function literalAddress(host: string): string | undefined {
  if (host.startsWith("[") && host.endsWith("]")) return host.slice(1, -1);
  if (host.includes(":") || parseIPv4(host) !== undefined) return host;
  return undefined;
}

// ---- address parsing and the blocked ranges ----

type ParsedIp = { family: 4; value: number } | { family: 6; value: bigint };

function parseIp(text: string): ParsedIp | undefined {
  if (text.includes(":")) {
    const value = parseIPv6(text);
    return value === undefined ? undefined : { family: 6, value };
  }
  const value = parseIPv4(text);
  return value === undefined ? undefined : { family: 4, value };
}

/** Strict dotted quad; leading zeros are refused because some stacks read them as octal. */
function parseIPv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0;
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = value * 256 + octet;
  }
  return value;
}

/** RFC 4291 text form: eight hex groups, one `::` run of zeros, an optional dotted IPv4 tail. No zone ids. */
function parseIPv6(text: string): bigint | undefined {
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const compressed = halves.length === 2;
  const head = parseGroups(halves[0] ?? "", !compressed);
  const tail = compressed ? parseGroups(halves[1] ?? "", true) : [];
  if (head === undefined || tail === undefined) return undefined;
  const explicit = head.length + tail.length;
  if (compressed ? explicit > 7 : explicit !== 8) return undefined;
  const groups = [...head, ...new Array<number>(8 - explicit).fill(0), ...tail];
  return groups.reduce((acc, group) => (acc << 16n) | BigInt(group), 0n);
}

/** Colon-separated 16-bit groups; a dotted IPv4 may only end the address and counts as two groups. */
function parseGroups(text: string, mayEndWithIPv4: boolean): number[] | undefined {
  if (text === "") return [];
  const parts = text.split(":");
  const groups: number[] = [];
  for (const [index, part] of parts.entries()) {
    if (mayEndWithIPv4 && index === parts.length - 1 && part.includes(".")) {
      const v4 = parseIPv4(part);
      if (v4 === undefined) return undefined;
      groups.push(v4 >>> 16, v4 & 0xffff);
    } else if (/^[0-9a-fA-F]{1,4}$/.test(part)) {
      groups.push(parseInt(part, 16));
    } else {
      return undefined;
    }
  }
  return groups;
}

interface Range<T> {
  base: T;
  bits: number;
  label: string;
}

function ipv4Range(cidr: string, label: string): Range<number> {
  const [base = "", bits = ""] = cidr.split("/");
  const value = parseIPv4(base);
  if (value === undefined) throw new Error(`bad IPv4 range ${cidr}`);
  return { base: value, bits: Number(bits), label: `${label} ${cidr}` };
}

function ipv6Range(cidr: string, label: string): Range<bigint> {
  const [base = "", bits = ""] = cidr.split("/");
  const value = parseIPv6(base);
  if (value === undefined) throw new Error(`bad IPv6 range ${cidr}`);
  return { base: value, bits: Number(bits), label: `${label} ${cidr}` };
}

const IPV4_BLOCKED: readonly Range<number>[] = [
  ipv4Range("0.0.0.0/8", "this network"),
  ipv4Range("10.0.0.0/8", "private"),
  ipv4Range("100.64.0.0/10", "carrier-grade NAT"),
  ipv4Range("127.0.0.0/8", "loopback"),
  ipv4Range("169.254.0.0/16", "link-local"),
  ipv4Range("172.16.0.0/12", "private"),
  ipv4Range("192.0.0.0/24", "IETF protocol assignments"),
  ipv4Range("192.0.2.0/24", "documentation"),
  ipv4Range("192.88.99.0/24", "6to4 relay anycast"),
  ipv4Range("192.168.0.0/16", "private"),
  ipv4Range("198.18.0.0/15", "benchmarking"),
  ipv4Range("198.51.100.0/24", "documentation"),
  ipv4Range("203.0.113.0/24", "documentation"),
  ipv4Range("224.0.0.0/4", "multicast"),
  ipv4Range("240.0.0.0/4", "reserved"),
  ipv4Range("255.255.255.255/32", "broadcast"),
];

const IPV6_BLOCKED: readonly Range<bigint>[] = [
  ipv6Range("::/128", "unspecified"),
  ipv6Range("::1/128", "loopback"),
  ipv6Range("::/96", "IPv4-compatible (deprecated)"),
  // 6to4 and Teredo (like NAT64 below) reach IPv4 hosts through relays run by others, so they are
  // blocked whole rather than judged by the IPv4 address they carry.
  ipv6Range("2001::/32", "Teredo"),
  ipv6Range("2001:db8::/32", "documentation"),
  ipv6Range("2002::/16", "6to4"),
  ipv6Range("3fff::/20", "documentation"),
  ipv6Range("fc00::/7", "unique local"),
  ipv6Range("fe80::/10", "link-local"),
  ipv6Range("ff00::/8", "multicast"),
];

const NAT64 = ipv6Range("64:ff9b::/96", "NAT64");
const IPV4_MAPPED = ipv6Range("::ffff:0:0/96", "IPv4-mapped");
// Everything public on the IPv6 internet is in 2000::/3; the rest is special-purpose or unassigned.
const GLOBAL_UNICAST = ipv6Range("2000::/3", "global unicast");

function formatIPv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff].join(".");
}

function inRange4(value: number, range: Range<number>): boolean {
  const shift = 32 - range.bits;
  // Division instead of >>> because a shift by 32 is a no-op in JavaScript.
  return Math.floor(value / 2 ** shift) === Math.floor(range.base / 2 ** shift);
}

function inRange6(value: bigint, range: Range<bigint>): boolean {
  const shift = BigInt(128 - range.bits);
  return value >> shift === range.base >> shift;
}

/** The name of the blocked range an address falls in, or undefined when it is public. */
function blockedRange(ip: string): string | undefined {
  const parsed = parseIp(ip);
  if (parsed === undefined) return "not an IP address";
  if (parsed.family === 4) return IPV4_BLOCKED.find((r) => inRange4(parsed.value, r))?.label;
  if (inRange6(parsed.value, IPV4_MAPPED)) {
    const label = IPV4_BLOCKED.find((r) => inRange4(Number(parsed.value & 0xffffffffn), r))?.label;
    return label === undefined ? undefined : `${label}, IPv4-mapped`;
  }
  // Blocked whole; the IPv4 it translates to is named so the operator sees what was aimed at.
  if (inRange6(parsed.value, NAT64)) return `${NAT64.label} to ${formatIPv4(Number(parsed.value & 0xffffffffn))}`;
  const special = IPV6_BLOCKED.find((r) => inRange6(parsed.value, r));
  if (special !== undefined) return special.label;
  return inRange6(parsed.value, GLOBAL_UNICAST) ? undefined : "outside global unicast 2000::/3";
}
