import { randomBytes } from "node:crypto";
import type { Namespace } from "../../gen/v1/namespace.js";
import { isAdmin, type Principal } from "../platform/auth.js";
import { checkBatchSize, settle, type BatchResult } from "../platform/batch.js";
import { NAMESPACES_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { NamespaceRow } from "../platform/db/schema.js";
import type { Notifications } from "../platform/db/notifications.js";
import { pageOf } from "../platform/paging.js";
import {
  alreadyExists,
  failedPrecondition,
  notFound,
  permissionDenied,
  RpcError,
  unauthenticated,
  Violations,
} from "../platform/errors.js";
import type { NamespaceCache } from "./cache.js";
import { watchNamespaces, type NamespaceEvent } from "./namespace-watch.js";
import * as repo from "./repository.js";
import type { NamespaceView } from "./repository.js";
import {
  checkName,
  checkWritableFields,
  IMMUTABLE_FIELDS,
  ownersOf,
  presentFields,
  UPDATABLE_FIELDS,
  wildcardMatcher,
  type UpdatableField,
} from "./rules.js";

export const MAX_BATCH = 100;
const MAX_FILTER = 1024;
const NAMESPACE_PAGES = { defaultSize: 100, maxSize: 100 };

/** The request's filters and its offset and limit as sent (the service applies the page's defaults). */
export interface ListFilters {
  names: string[];
  owners: string[];
  offset: number;
  limit: number;
}

/** Namespace rules: validation, permissions, and writes that keep every replica's cache current. */
export class NamespaceService {
  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly cache: NamespaceCache,
  ) {}

  /** Admins, owners, and granted users or groups may edit and delete a namespace. */
  canEdit(principal: Principal, ns: Pick<NamespaceView, "owners" | "granted_users" | "granted_groups">): boolean {
    return (
      isAdmin(principal) ||
      ownersOf(ns.owners).includes(principal.accountId) ||
      ns.granted_users.includes(principal.accountId) ||
      ns.granted_groups.some((g) => principal.groupIds.includes(g))
    );
  }

  /** A namespace token authenticates as that namespace, with no scopes of its own. */
  async principalOfToken(token: string): Promise<Principal> {
    const record = await this.cache.findByToken(token);
    if (!record) throw unauthenticated("invalid namespace token", "INVALID_NAMESPACE_TOKEN");
    return { accountId: "", keyId: "", scopes: new Set(), groupIds: [], namespace: record.name };
  }

  async create(principal: Principal, ns: Namespace | undefined, at = "namespace"): Promise<NamespaceView> {
    const violations = new Violations();
    if (!ns) {
      violations.add(at, "is required");
      violations.throwIfAny();
    }
    const input = ns!;
    checkName(violations, `${at}.name`, input.name);
    const fields = new Set<UpdatableField>(UPDATABLE_FIELDS.filter((f) => !f.startsWith("remove_")));
    checkWritableFields(violations, at, input, fields);
    violations.throwIfAny();
    const name = input.name!;

    const grants = { users: dedupe(input.userIds), groups: dedupe(input.groupIds) };
    const row = await repo.insertNamespace(
      this.db,
      {
        name,
        comment: input.comment ?? null,
        owners: input.owners ?? principal.accountId,
        token: newToken(),
        serviceExportTo: dedupe(input.serviceExportTo),
        metadata: input.metadata,
        syncToGlobalRegistry: input.syncToGlobalRegistry,
        createdBy: principal.accountId || null,
      },
      grants,
    );
    if (!row) throw alreadyExists(`namespace "${name}"`, "NAMESPACE_EXISTS");
    await this.announce(name);
    // Nothing can be registered in a namespace that did not exist a moment ago: counts are 0.
    return {
      ...row,
      granted_users: grants.users,
      granted_groups: grants.groups,
      service_count: 0,
      instance_count: 0,
      healthy_instance_count: 0,
    };
  }

  async batchCreate(principal: Principal, list: Namespace[]): Promise<BatchResult<NamespaceView>[]> {
    checkBatchSize(list.length, "namespaces", MAX_BATCH);
    const results: BatchResult<NamespaceView>[] = [];
    for (const [i, ns] of list.entries()) {
      results.push(await settle(() => this.create(principal, ns, `namespaces[${i}]`)));
    }
    return results;
  }

  async get(name: string): Promise<NamespaceView> {
    const violations = new Violations();
    checkName(violations, "name", name);
    violations.throwIfAny();
    const record = await this.cache.get(name);
    if (!record) throw notFound(`namespace "${name}"`, "NAMESPACE_NOT_FOUND");
    return record;
  }

  /** Streams every namespace, then each change, to `send` until `signal` aborts. */
  watch(signal: AbortSignal, send: (event: NamespaceEvent) => Promise<void>): Promise<void> {
    return watchNamespaces(this.cache, signal, send);
  }

  async list(filters: ListFilters): Promise<{ amount: number; rows: NamespaceView[] }> {
    const violations = new Violations();
    for (const [field, values] of [
      ["name", filters.names],
      ["owner", filters.owners],
    ] as const) {
      values.forEach((v, i) => {
        if (v.length > MAX_FILTER) violations.add(`${field}[${i}]`, `must be at most ${MAX_FILTER} characters`);
      });
    }
    violations.throwIfAny();

    const nameMatchers = filters.names.filter((n) => n !== "").map(wildcardMatcher);
    const ownerMatchers = filters.owners.filter((o) => o !== "").map(wildcardMatcher);
    let rows = await this.cache.list();
    if (nameMatchers.length > 0 || ownerMatchers.length > 0) {
      rows = rows.filter(
        (r) =>
          (nameMatchers.length === 0 || nameMatchers.some((m) => m(r.name))) &&
          (ownerMatchers.length === 0 || ownersOf(r.owners).some((o) => ownerMatchers.some((m) => m(o)))),
      );
    }
    const { offset, limit } = pageOf(filters, NAMESPACE_PAGES);
    return { amount: rows.length, rows: rows.slice(offset, offset + limit) };
  }

  async update(principal: Principal, ns: Namespace | undefined, mask: string[]): Promise<NamespaceView> {
    const violations = new Violations();
    if (!ns) {
      violations.add("namespace", "is required");
      violations.throwIfAny();
    }
    const input = ns!;
    checkName(violations, "namespace.name", input.name);
    const fields = mask.length > 0 ? maskFields(violations, mask) : presentFields(input);
    checkWritableFields(violations, "namespace", input, fields);
    violations.throwIfAny();
    const name = input.name!;

    await this.db.transaction().execute(async (tx) => {
      const row = await this.lockIfPermitted(tx, principal, name, "edit", "NAMESPACE_NOT_EDITABLE");
      if (!row) throw notFound(`namespace "${name}"`, "NAMESPACE_NOT_FOUND");
      await repo.updateNamespace(tx, row.id, {
        ...(fields.has("comment") ? { comment: input.comment ?? null } : {}),
        ...(fields.has("owners") ? { owners: input.owners ?? "" } : {}),
        ...(fields.has("service_export_to") ? { serviceExportTo: dedupe(input.serviceExportTo) } : {}),
        ...(fields.has("metadata") ? { metadata: input.metadata } : {}),
        ...(fields.has("sync_to_global_registry") ? { syncToGlobalRegistry: input.syncToGlobalRegistry } : {}),
      });
      if (fields.has("user_ids")) await repo.addGrants(tx, row.id, "user", dedupe(input.userIds));
      if (fields.has("group_ids")) await repo.addGrants(tx, row.id, "group", dedupe(input.groupIds));
      if (fields.has("remove_user_ids")) await repo.removeGrants(tx, row.id, "user", dedupe(input.removeUserIds));
      if (fields.has("remove_group_ids")) await repo.removeGrants(tx, row.id, "group", dedupe(input.removeGroupIds));
    });
    return this.afterWrite(name);
  }

  /** Deleting a namespace that does not exist succeeds. */
  async delete(principal: Principal, name: string, at = "name"): Promise<void> {
    const violations = new Violations();
    checkName(violations, at, name);
    violations.throwIfAny();
    const deleted = await this.db.transaction().execute(async (tx) => {
      const row = await this.lockIfPermitted(tx, principal, name, "delete", "NAMESPACE_NOT_DELETEABLE");
      if (!row) return false;
      if (await repo.hasServices(tx, row.id)) throw namespaceHasServices(name);
      try {
        await repo.deleteNamespace(tx, row.id);
      } catch (error) {
        // A service registered between the check and the delete still holds the namespace.
        if ((error as { code?: string }).code === "23503") throw namespaceHasServices(name);
        throw error;
      }
      return true;
    });
    if (deleted) await this.announce(name);
  }

  async batchDelete(principal: Principal, names: string[]): Promise<BatchResult<string>[]> {
    checkBatchSize(names.length, "names", MAX_BATCH);
    const results: BatchResult<string>[] = [];
    for (const [i, name] of names.entries()) {
      results.push(await settle(async () => (await this.delete(principal, name, `names[${i}]`), name)));
    }
    return results;
  }

  async getToken(principal: Principal, name: string): Promise<string> {
    const record = await this.get(name);
    if (!this.canEdit(principal, record)) {
      throw permissionDenied(`you may not read the token of namespace "${name}"`, "NAMESPACE_NOT_EDITABLE");
    }
    return record.token;
  }

  async rotateToken(principal: Principal, name: string): Promise<string> {
    const violations = new Violations();
    checkName(violations, "name", name);
    violations.throwIfAny();
    const token = newToken();
    await this.db.transaction().execute(async (tx) => {
      const row = await this.lockIfPermitted(tx, principal, name, "rotate the token of", "NAMESPACE_NOT_EDITABLE");
      if (!row) throw notFound(`namespace "${name}"`, "NAMESPACE_NOT_FOUND");
      await repo.updateNamespace(tx, row.id, { token });
    });
    await this.announce(name);
    return token;
  }

  /**
   * Locks the namespace for the rest of the transaction and checks, against its current owners and
   * grants, that the caller may `action` it. Undefined when there is no such namespace.
   */
  private async lockIfPermitted(
    tx: Db,
    principal: Principal,
    name: string,
    action: string,
    reason: string,
  ): Promise<NamespaceRow | undefined> {
    const row = await repo.lockNamespace(tx, name);
    if (!row) return undefined;
    const grants = await repo.grantsOf(tx, row.id);
    if (!this.canEdit(principal, { owners: row.owners, granted_users: grants.users, granted_groups: grants.groups })) {
      throw permissionDenied(`you may not ${action} namespace "${name}"`, reason);
    }
    return row;
  }

  /** After a committed change: this replica drops the entry at once, every other one before we return. */
  private async announce(name: string): Promise<void> {
    this.cache.invalidate(name);
    await this.notifications.publish(NAMESPACES_CHANNEL, name);
  }

  private async afterWrite(name: string): Promise<NamespaceView> {
    await this.announce(name);
    const record = await this.cache.get(name);
    if (!record) throw notFound(`namespace "${name}"`, "NAMESPACE_NOT_FOUND");
    return record;
  }
}

function maskFields(violations: Violations, paths: string[]): Set<UpdatableField> {
  const fields = new Set<UpdatableField>();
  paths.forEach((raw, i) => {
    const path = raw.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    if ((UPDATABLE_FIELDS as readonly string[]).includes(path)) fields.add(path as UpdatableField);
    else if (IMMUTABLE_FIELDS.includes(path)) violations.add(`update_mask.paths[${i}]`, `"${raw}" cannot be changed`);
    else violations.add(`update_mask.paths[${i}]`, `unknown field "${raw}"`);
  });
  return fields;
}

function namespaceHasServices(name: string): RpcError {
  return failedPrecondition(`namespace "${name}" still has services; delete them first`, "NAMESPACE_HAS_SERVICES");
}

function newToken(): string {
  return randomBytes(16).toString("hex");
}

function dedupe(values: string[]): string[] {
  return [...new Set(values)];
}
