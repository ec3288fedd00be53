import { createHash, randomBytes } from "node:crypto";

const KEY_PREFIX = "atr_";

/** A new API key: a fixed prefix and 256 random bits, base64url. */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

/** Keys carry 256 bits of entropy, so one SHA-256 is enough to store them safely. */
export function hashApiKey(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

/** What lists show of a key: enough to recognise it, too little to use it. */
export function keyPrefix(key: string): string {
  return key.slice(0, 12);
}
