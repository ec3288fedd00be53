import { randomBytes } from "node:crypto";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids of rows are UUIDs; checking first turns a malformed id into NOT_FOUND or a field error, not a SQL error. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/**
 * An id as the database writes it, in lower case: PostgreSQL reads a UUID in capitals as the same
 * one, so comparisons made here must too. Anything that is not a UUID is returned as it is.
 */
export function canonicalId(value: string): string {
  return isUuid(value) ? value.toLowerCase() : value;
}

/** RFC 3339 UTC with second precision, e.g. `2026-11-20T23:05:48Z`. */
export function rfc3339(date: Date): string {
  // Built from the UTC fields: listings format several dates a row, and toISOString plus a replace
  // was the largest single cost of ListNamespaces (this is about three times faster).
  const year = date.getUTCFullYear();
  if (!(year >= 1 && year <= 9999)) return date.toISOString().replace(/\.\d{3}Z$/, "Z");
  return `${String(year).padStart(4, "0")}-${two(date.getUTCMonth() + 1)}-${two(date.getUTCDate())}T${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:${two(date.getUTCSeconds())}Z`;
}

function two(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

/**
 * A version 7 UUID: the Unix time in milliseconds, then random bits. Rows keyed by these are
 * inserted in time order, at the right edge of their index, as PostgreSQL's uuidv7() makes them.
 */
export function uuidv7(): string {
  return formatUuid(uuidv7Bytes(randomBytes(16), Date.now()));
}

/**
 * The smallest version 7 UUID of the millisecond `at`: every one made earlier sorts below it, every
 * one made then or later not, so an index on such ids doubles as an index on when rows were made.
 */
export function uuidv7Floor(at: Date): string {
  return formatUuid(uuidv7Bytes(Buffer.alloc(16), at.getTime()));
}

function uuidv7Bytes(bytes: Buffer, ms: number): Buffer {
  bytes.writeUIntBE(ms, 0, 6);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  return bytes;
}

function formatUuid(bytes: Buffer): string {
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
