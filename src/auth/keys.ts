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

/** A generated key's length: its prefix and 43 base64url characters. */
const GENERATED_LENGTH = KEY_PREFIX.length + 43;

/**
 * What lists show of a key: enough to recognise it, too little to use it. A generated key shows its
 * prefix and 8 of its 43 random characters; a key made from ADMIN_TOKEN (16 characters or more, as
 * random as the operator made them) a quarter of it at most, since 12 of 16 characters would leave 4
 * to guess.
 */
export function keyPrefix(key: string): string {
  const generated = key.startsWith(KEY_PREFIX) && key.length === GENERATED_LENGTH;
  return key.slice(0, generated ? 12 : Math.min(12, Math.floor(key.length / 4)));
}
