import { createHash, randomBytes } from "node:crypto";

const KEY_PREFIX = "atr_";

/** A new API key: a fixed prefix and 256 random bits, base64url. */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

/** Hashes of the keys presented most recently; a client sends the same key with every call. */
const recentHashes = new Map<string, string>();
const RECENT_HASHES = 1_024;

/**
 * Keys carry 256 bits of entropy, so one SHA-256 is enough to store them safely. Hashing was 3 % of
 * a cheap call's server CPU, so the hashes of recent keys are kept (the keys pass through memory
 * with every call anyway); the oldest goes first, so strangers' made-up keys cannot grow it.
 */
export function hashApiKey(key: string): string {
  let hash = recentHashes.get(key);
  if (hash === undefined) {
    hash = createHash("sha256").update(key).digest("hex");
    if (recentHashes.size >= RECENT_HASHES) recentHashes.delete(recentHashes.keys().next().value!);
    recentHashes.set(key, hash);
  }
  return hash;
}

/** What lists show of a key: enough to recognise it, too little to use it. */
export function keyPrefix(key: string): string {
  return key.slice(0, 12);
}
