/** What an API key may do. `admin` may do everything. */
export const SCOPES = ["admin", "namespaces", "webhooks", "faceswap", "events:publish"] as const;
export type Scope = (typeof SCOPES)[number];

export function isScope(value: string): value is Scope {
  return (SCOPES as readonly string[]).includes(value);
}

/** The authenticated caller of one request. */
export interface Principal {
  /** The API key's account; empty for a namespace token. */
  accountId: string;
  /** The API key's id; empty for a namespace token. */
  keyId: string;
  scopes: ReadonlySet<Scope>;
  /** Groups of the key's account (namespace grants may name groups). */
  groupIds: readonly string[];
  /** Set when the caller presented a namespace's token: it acts for that namespace only. */
  namespace?: string;
  /** When the API key expires (epoch milliseconds), if it does. */
  expiresAt?: number;
}

export function hasScope(principal: Principal, scope: Scope): boolean {
  return principal.scopes.has("admin") || principal.scopes.has(scope);
}

export function isAdmin(principal: Principal): boolean {
  return principal.scopes.has("admin");
}

/** A presented credential, as the transports extract it. */
export interface Credential {
  token: string;
  /** The `auth_token` cookie, or an Authorization/authorization bearer header. */
  source: "bearer" | "cookie";
}

/** Resolves a credential to its principal, or throws UNAUTHENTICATED. */
export type Authenticator = (credential: Credential | undefined) => Promise<Principal>;

/**
 * Subscribes to API keys withdrawn or changed on any replica: `listener` gets the key's id, or
 * undefined when any key may have changed (notices were lost). Returns the function that unsubscribes.
 */
export type KeyChanges = (listener: (keyId: string | undefined) => void) => () => void;

/** `Bearer <token>` (case-insensitive scheme) to the token. */
export function parseBearer(header: string | undefined): string | undefined {
  const match = /^\s*bearer\s+(\S+)\s*$/i.exec(header ?? "");
  return match?.[1];
}
