import { hash, randomBytes } from "node:crypto";

const KEY_PREFIX = "atr_";

/** A new API key: a fixed prefix and 256 random bits, base64url. */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

/**
 * Keys carry 256 bits of entropy, so one SHA-256 is enough to store them safely. Every call hashes its
 * key to find it in the cache: the one-shot hash takes 0.4-0.6 µs where a Hash object took 1.3-2.0.
 */
export function hashApiKey(key: string): string {
  return hash("sha256", key, "hex");
}

/** What lists show of a key: enough to recognise it, too little to use it. */
export function keyPrefix(key: string): string {
  return key.slice(0, 12);
}
