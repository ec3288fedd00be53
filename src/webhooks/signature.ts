import { createHmac, timingSafeEqual } from "node:crypto";

/** `sha256=` and the lowercase hex HMAC-SHA256 of the exact body bytes, keyed by the secret. */
export function signBody(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}

/**
 * What a receiver does before parsing the JSON: compares the whole `X-Webhook-Signature` value with
 * the signature of the raw body, in constant time.
 */
export function verifySignature(secret: string, rawBody: string | Buffer, header: string | undefined): boolean {
  if (!header) return false;
  const expected = Buffer.from(signBody(secret, rawBody));
  const given = Buffer.from(header);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** What lists show of a secret: its first 10 characters (code points: never half an emoji) and "...". */
export function maskSecret(secret: string): string {
  return `${Array.from(secret).slice(0, 10).join("")}...`;
}
