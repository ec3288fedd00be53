import { sql } from "kysely";
import { PLANS } from "../billing/plans.js";
import * as billing from "../billing/repository.js";
import { isScope, type Authenticator, type KeyChanges, type Principal, type Scope } from "../platform/auth.js";
import { API_KEYS_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { ApiKeyRow } from "../platform/db/schema.js";
import { invalidArgument, notFound, oneOf, unauthenticated, Violations } from "../platform/errors.js";
import { isUuid } from "../platform/ids.js";
import type { Logger } from "../platform/logger.js";
import { pageOf } from "../platform/paging.js";
import { generateApiKey, hashApiKey, keyPrefix } from "./keys.js";
import * as repo from "./repository.js";
import type { AccountView } from "./repository.js";

/** A cached key is re-read at least this often, even if a change notice were lost. */
const CACHE_TTL_MS = 60_000;
const MAX_NAME = 200;
const MAX_GROUPS = 100;
const MAX_GRANT = 1_000_000_000;
const ACCOUNT_PAGES = { defaultSize: 100, maxSize: 1000 };

interface CachedKey {
  principal: Principal;
  keyHash: string;
  expiresAt: number | null;
  revoked: boolean;
  cachedAt: number;
}

/**
 * Accounts and API keys: key authentication (cached in memory, dropped on every replica when a key
 * changes) and the admin operations.
 */
export class AuthService {
  private readonly cache = new Map<string, CachedKey>();
  private readonly keyListeners = new Set<(keyId: string | undefined) => void>();

  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly logger: Logger,
  ) {
    notifications.on(API_KEYS_CHANNEL, (keyHash) => this.forget(keyHash));
    notifications.onReconnect(() => {
      this.cache.clear();
      for (const listener of this.keyListeners) listener(undefined);
    });
  }

  /** Streams authenticated by a key are told when it changes (see KeyChanges). */
  readonly onKeyChange: KeyChanges = (listener) => {
    this.keyListeners.add(listener);
    return () => this.keyListeners.delete(listener);
  };

  /** Drops a changed key from the cache; whoever holds a call made with it (this replica cached it then) hears of it. */
  private forget(keyHash: string, keyId = this.cache.get(keyHash)?.principal.keyId): void {
    this.cache.delete(keyHash);
    if (keyId !== undefined) for (const listener of this.keyListeners) listener(keyId);
  }

  readonly authenticate: Authenticator = async (credential) => {
    if (!credential) {
      throw unauthenticated("missing credentials: send \"authorization: Bearer <API key>\"", "MISSING_CREDENTIALS");
    }
    const keyHash = hashApiKey(credential.token);
    const now = Date.now();
    let entry = this.cache.get(keyHash);
    if (!entry || now - entry.cachedAt > CACHE_TTL_MS) {
      const row = await repo.findApiKeyByHash(this.db, keyHash);
      if (!row) throw unauthenticated("invalid API key", "INVALID_API_KEY");
      entry = {
        principal: {
          accountId: row.account_id,
          keyId: row.id,
          scopes: new Set(row.scopes.filter(isScope)),
          groupIds: row.group_ids,
          ...(row.expires_at ? { expiresAt: row.expires_at.getTime() } : {}),
        },
        keyHash,
        expiresAt: row.expires_at?.getTime() ?? null,
        revoked: row.revoked_at !== null,
        cachedAt: now,
      };
      this.cache.set(keyHash, entry);
    }
    if (entry.revoked) throw unauthenticated("this API key has been revoked", "API_KEY_REVOKED");
    if (entry.expiresAt !== null && entry.expiresAt <= now) {
      throw unauthenticated("this API key has expired", "API_KEY_EXPIRED");
    }
    return entry.principal;
  };

  /**
   * First start: make sure an admin key exists. ADMIN_TOKEN, when set, becomes an admin key unless
   * a key with that value exists already (even revoked); otherwise, with no key at all, one is
   * generated and printed once. Replicas starting together serialise on an advisory lock.
   */
  async bootstrap(adminToken: string | undefined): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await sql`select pg_advisory_xact_lock(hashtext('atrium.bootstrap_admin'))`.execute(tx);
      const key = adminToken ?? generateApiKey();
      if (adminToken) {
        const existing = await repo.findApiKeyByHash(tx, hashApiKey(adminToken));
        // A key made before lists showed less of a token the operator chose is listed as it is now.
        if (existing && existing.prefix !== keyPrefix(adminToken)) await repo.setApiKeyPrefix(tx, existing.id, keyPrefix(adminToken));
        if (existing) return;
      } else if ((await repo.countApiKeys(tx)) > 0) {
        return;
      }
      const account = await repo.insertAccount(tx, "admin", []);
      const row = await repo.insertApiKey(tx, {
        accountId: account.id,
        name: "bootstrap admin key",
        scopes: ["admin"],
        prefix: keyPrefix(key),
        keyHash: hashApiKey(key),
        expiresAt: null,
      });
      this.logger.warn(
        {
          event: "bootstrap_admin_key",
          account_id: account.id,
          key_id: row.id,
          ...(adminToken ? { from: "ADMIN_TOKEN" } : { key, note: "shown once; store it now" }),
        },
        "created the bootstrap admin API key",
      );
    });
  }

  async createAccount(name: string, groupIds: string[]): Promise<AccountView> {
    const violations = new Violations();
    checkName(violations, "name", name);
    if (groupIds.length > MAX_GROUPS) violations.add("group_ids", `at most ${MAX_GROUPS} groups`);
    groupIds.forEach((g, i) => {
      if (g.trim() === "" || g.length > MAX_NAME) violations.add(`group_ids[${i}]`, `must be 1..${MAX_NAME} characters`);
    });
    violations.throwIfAny();
    return repo.insertAccount(this.db, name.trim(), [...new Set(groupIds)]);
  }

  listAccounts(page: { offset: number; limit: number }) {
    const { offset, limit } = pageOf(page, ACCOUNT_PAGES);
    return repo.listAccounts(this.db, offset, limit);
  }

  async createApiKey(
    accountId: string,
    name: string,
    scopes: string[],
    expireTime: Date | undefined,
  ): Promise<{ row: ApiKeyRow; key: string }> {
    const violations = new Violations();
    if (!isUuid(accountId)) violations.add("account_id", "must be an account id (a UUID)");
    checkName(violations, "name", name);
    if (scopes.length === 0) violations.add("scopes", "at least one scope is required");
    scopes.forEach((scope, i) => {
      if (!isScope(scope)) {
        violations.add(`scopes[${i}]`, `unknown scope "${scope}"; use admin, namespaces, webhooks, faceswap or events:publish`);
      }
    });
    if (expireTime && expireTime.getTime() <= Date.now()) violations.add("expire_time", "must be in the future");
    violations.throwIfAny();
    if (!(await repo.findAccount(this.db, accountId))) throw notFound(`account ${accountId}`, "ACCOUNT_NOT_FOUND");

    const key = generateApiKey();
    const row = await repo.insertApiKey(this.db, {
      accountId,
      name: name.trim(),
      scopes: [...new Set(scopes as Scope[])],
      prefix: keyPrefix(key),
      keyHash: hashApiKey(key),
      expiresAt: expireTime ?? null,
    });
    return { row, key };
  }

  async getAccount(accountId: string): Promise<AccountView> {
    const account = isUuid(accountId) ? await repo.findAccount(this.db, accountId) : undefined;
    if (!account) throw notFound(`account ${accountId}`, "ACCOUNT_NOT_FOUND");
    return account;
  }

  async setPlan(accountId: string, plan: string): Promise<AccountView> {
    const violations = new Violations();
    if (!isUuid(accountId)) violations.add("account_id", "must be an account id (a UUID)");
    const known = oneOf(violations, "plan", plan, PLANS);
    violations.throwIfAny();
    if (!(await billing.setPlan(this.db, accountId, known!))) throw notFound(`account ${accountId}`, "ACCOUNT_NOT_FOUND");
    return this.getAccount(accountId);
  }

  async grantCredits(accountId: string, amount: number, reason: string): Promise<AccountView> {
    const violations = new Violations();
    if (!isUuid(accountId)) violations.add("account_id", "must be an account id (a UUID)");
    if (!Number.isSafeInteger(amount) || amount === 0 || Math.abs(amount) > MAX_GRANT) {
      violations.add("amount", `must be a non-zero integer from -${MAX_GRANT} to ${MAX_GRANT}`);
    }
    if (reason.length > MAX_NAME) violations.add("reason", `must be at most ${MAX_NAME} characters`);
    violations.throwIfAny();
    const found = await this.db.transaction().execute((tx) => billing.grant(tx, accountId, amount, reason || "granted by an admin"));
    if (!found) throw notFound(`account ${accountId}`, "ACCOUNT_NOT_FOUND");
    return this.getAccount(accountId);
  }

  async listApiKeys(accountId: string | undefined): Promise<ApiKeyRow[]> {
    if (accountId !== undefined && !isUuid(accountId)) {
      throw invalidArgument([{ field: "account_id", description: "must be an account id (a UUID)" }]);
    }
    return repo.listApiKeys(this.db, accountId);
  }

  async revokeApiKey(keyId: string): Promise<ApiKeyRow> {
    if (keyId === "") throw invalidArgument([{ field: "key_id", description: "is required" }]);
    if (!isUuid(keyId)) throw notFound(`API key ${keyId}`, "API_KEY_NOT_FOUND");
    const row = await repo.revokeApiKey(this.db, keyId);
    if (!row) throw notFound(`API key ${keyId}`, "API_KEY_NOT_FOUND");
    this.forget(row.key_hash, row.id);
    await this.notifications.publish(API_KEYS_CHANNEL, row.key_hash);
    return row;
  }
}

function checkName(violations: Violations, field: string, value: string): void {
  if (value.trim() === "") violations.add(field, "is required");
  else if (value.length > MAX_NAME) violations.add(field, `must be at most ${MAX_NAME} characters`);
}
