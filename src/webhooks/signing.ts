import { createHmac, randomBytes } from "node:crypto";
import type { SignatureScheme } from "../platform/db/schema.js";
import { oneOf, type Violations } from "../platform/errors.js";
import { signBody } from "./signature.js";

/** How each scheme's generated secret is written after `whsec_`: hex for the default, base64 as Standard Webhooks reads it. */
const SECRET_ENCODING = { seed: "hex", "standard-webhooks": "base64" } satisfies Record<SignatureScheme, BufferEncoding>;
/** How long a replaced secret keeps signing, so receivers can switch without losing a delivery. */
export const PREVIOUS_SECRET_TTL_MS = 24 * 60 * 60 * 1000;
/** The default ("seed") scheme's header carrying the replaced secret's signature while it still signs. */
const PREVIOUS_SIGNATURE_HEADER = "X-Webhook-Signature-Previous";
const STANDARD_SECRET = /^whsec_((?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?)$/;
const STANDARD_KEY_BYTES = { min: 24, max: 64 };

/** The secrets a delivery is signed with: the webhook's, and the replaced one while it lasts. */
export interface SigningKeys {
  signature_scheme: SignatureScheme;
  secret: string;
  /** Null once expired. */
  previous_secret: string | null;
}

/** The scheme when it is one; otherwise names `signature_scheme` in `violations`. */
export function checkScheme(violations: Violations, scheme: string): SignatureScheme | undefined {
  return oneOf(violations, "signature_scheme", scheme, SECRET_ENCODING);
}

/** Whether the Standard Webhooks scheme can sign with `secret` (whsec_ and the base64 of a key of the right size). */
export function isStandardSecret(secret: string): boolean {
  return standardKey(secret) !== undefined;
}

export function checkStandardSecret(violations: Violations, secret: string): void {
  if (!isStandardSecret(secret)) {
    violations.add(
      "secret",
      `the standard-webhooks scheme needs whsec_ followed by the base64 of ${STANDARD_KEY_BYTES.min} to ${STANDARD_KEY_BYTES.max} bytes`,
    );
  }
}

/** A new secret in the scheme's format: whsec_ + 48 hex for the default scheme, or whsec_ + base64 of 24 bytes. */
export function generateSecretFor(scheme: SignatureScheme): string {
  return `whsec_${randomBytes(24).toString(SECRET_ENCODING[scheme])}`;
}

/** The previous secret, while it still signs. */
export function livePreviousSecret(row: { previous_secret: string | null; previous_secret_expires_at: Date | null }, now: Date): string | null {
  return row.previous_secret && row.previous_secret_expires_at && row.previous_secret_expires_at > now ? row.previous_secret : null;
}

/**
 * The signature headers of one attempt over the exact body bytes. Seed: `X-Webhook-Signature`
 * (plus `X-Webhook-Signature-Previous` during a rotation). Standard Webhooks: `webhook-id` (the
 * delivery's id, stable across retries), `webhook-timestamp` (this attempt, Unix seconds) and
 * `webhook-signature`, one `v1,<base64>` per live secret, space-separated.
 */
export function signatureHeaders(keys: SigningKeys, deliveryId: string, body: string, sentAt: Date): Record<string, string> {
  if (keys.signature_scheme === "standard-webhooks") {
    const timestamp = String(Math.floor(sentAt.getTime() / 1000));
    const signatures = [keys.secret, keys.previous_secret]
      .map((secret) => (secret ? standardKey(secret) : undefined))
      .filter((key) => key !== undefined)
      .map((key) => `v1,${createHmac("sha256", key).update(`${deliveryId}.${timestamp}.${body}`).digest("base64")}`);
    return { "webhook-id": deliveryId, "webhook-timestamp": timestamp, "webhook-signature": signatures.join(" ") };
  }
  const headers: Record<string, string> = { "X-Webhook-Signature": signBody(keys.secret, body) };
  if (keys.previous_secret) headers[PREVIOUS_SIGNATURE_HEADER] = signBody(keys.previous_secret, body);
  return headers;
}

/** Standard Webhooks keys are the bytes of the base64 after `whsec_`. */
function standardKey(secret: string): Buffer | undefined {
  const match = STANDARD_SECRET.exec(secret);
  if (!match) return undefined;
  const key = Buffer.from(match[1]!, "base64");
  return key.length >= STANDARD_KEY_BYTES.min && key.length <= STANDARD_KEY_BYTES.max ? key : undefined;
}
