import { randomBytes } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import type { Namespace } from "../../gen/v1/namespace.js";
import { isAdmin, type Principal } from "../platform/auth.js";
import { checkBatchSize, settle, type BatchResult } from "../platform/batch.js";
import { isForeignKeyViolation, type Db } from "../platform/db/database.js";
import type { NamespaceFieldChange, NamespaceHistoryRow, NamespaceRow } from "../platform/db/schema.js";
import { canonicalId } from "../platform/ids.js";
import { TickBatcher } from "../platform/tick-batcher.js";
import { keysetPage, keysetResult, pageOf } from "../platform/paging.js";
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
import type { HistoryInput, NamespaceView } from "./repository.js";
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
const HISTORY_PAGES = { defaultSize: 100, maxSize: 1000 };
/** Prune a namespace's history once per this many of its changes. */
const PRUNE_EVERY = 100;
/** The actor recorded for a change made with a namespace's own token. */
const TOKEN_ACTOR = "namespace token";
/** A namespace token's scopes: none, shared by every call rather than a new set each. */
const NO_SCOPES: ReadonlySet<never> = new Set();
/** Fields whose values the history records before and after a change. */
const PLAIN_FIELDS = ["comment", "owners", "service_export_to", "metadata", "sync_to_global_registry"] as const;

/** The request's filters and its offset and limit as sent (the service applies the page's defaults). */
export interface ListFilters {
  names: string[];
  owners: string[];
  offset: number;
  limit: number;
}

/** Namespace rules: validation, permissions, and writes that keep every replica's cache current. */
export class NamespaceService {
  private readonly sinceLastPrune = new Map<string, number>();
  private openWatches = 0;
  /**
   * Creates arriving in the same tick (and while a statement runs) are inserted by one statement:
   * one commit, and its disk flush, for all of them instead of one each.
   */
  private readonly inserts = new TickBatcher<repo.NamespaceInsert, NamespaceRow | undefined>({
    write: (items) => repo.insertNamespaces(this.db, items),
    // A batch create's items fit one statement; more would let a burst of large ones make it huge.
    maxBatch: MAX_BATCH,
  });

  constructor(
    private readonly db: Db,
    private readonly cache: NamespaceCache,
    private readonly historyLimit: number,
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
    return { accountId: "", keyId: "", scopes: NO_SCOPES, groupIds: [], namespace: record.name };
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
    const values = {
      comment: input.comment ?? null,
      owners: input.owners ?? principal.accountId,
      service_export_to: dedupe(input.serviceExportTo),
      metadata: input.metadata,
      sync_to_global_registry: input.syncToGlobalRegistry,
    };
    const row = await this.inserts.add({
      namespace: {
        name,
        comment: values.comment,
        owners: values.owners,
        token: newToken(),
        serviceExportTo: values.service_export_to,
        metadata: values.metadata,
        syncToGlobalRegistry: values.sync_to_global_registry,
        createdBy: principal.accountId || null,
      },
      grants,
      history: historyOf(principal, "CREATED", [
        ...PLAIN_FIELDS.map((field) => ({ field, after: values[field] })),
        { field: "user_ids", after: grants.users },
        { field: "group_ids", after: grants.groups },
      ]),
    });
    if (!row) throw alreadyExists(`namespace "${name}"`, "NAMESPACE_EXISTS");
    await this.announce(name);
    await this.pruneNowAndThen(row);
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

  /** Each item is created or refused on its own; all of them are written by one statement. */
  async batchCreate(principal: Principal, list: Namespace[]): Promise<BatchResult<NamespaceView>[]> {
    checkBatchSize(list.length, "namespaces", MAX_BATCH);
    return Promise.all(list.map((ns, i) => settle(() => this.create(principal, ns, `namespaces[${i}]`))));
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
  async watch(signal: AbortSignal, send: (event: NamespaceEvent) => Promise<void>): Promise<void> {
    this.openWatches++;
    try {
      await watchNamespaces(this.cache, signal, send);
    } finally {
      this.openWatches--;
    }
  }

  /** Open WatchNamespaces streams on this replica. */
  get watchers(): number {
    return this.openWatches;
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
    // Owners' account ids compare as ownersOf writes them.
    const ownerMatchers = filters.owners.filter((o) => o !== "").map((o) => wildcardMatcher(canonicalId(o)));
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

    const updated = await this.db.transaction().execute(async (tx) => {
      const locked = await this.lockIfPermitted(tx, principal, name, "edit", "NAMESPACE_NOT_EDITABLE");
      if (!locked) throw notFound(`namespace "${name}"`, "NAMESPACE_NOT_FOUND");
      const { row, grants } = locked;
      const after = {
        comment: fields.has("comment") ? (input.comment ?? null) : row.comment,
        owners: fields.has("owners") ? (input.owners ?? "") : row.owners,
        service_export_to: fields.has("service_export_to") ? dedupe(input.serviceExportTo) : row.service_export_to,
        metadata: fields.has("metadata") ? input.metadata : row.metadata,
        sync_to_global_registry: fields.has("sync_to_global_registry") ? input.syncToGlobalRegistry : row.sync_to_global_registry,
      };
      await repo.updateNamespace(tx, row.id, {
        ...(fields.has("comment") ? { comment: after.comment } : {}),
        ...(fields.has("owners") ? { owners: after.owners } : {}),
        ...(fields.has("service_export_to") ? { serviceExportTo: after.service_export_to } : {}),
        ...(fields.has("metadata") ? { metadata: after.metadata } : {}),
        ...(fields.has("sync_to_global_registry") ? { syncToGlobalRegistry: after.sync_to_global_registry } : {}),
      });
      if (fields.has("user_ids")) await repo.addGrants(tx, row.id, "user", dedupe(input.userIds));
      if (fields.has("group_ids")) await repo.addGrants(tx, row.id, "group", dedupe(input.groupIds));
      if (fields.has("remove_user_ids")) await repo.removeGrants(tx, row.id, "user", dedupe(input.removeUserIds));
      if (fields.has("remove_group_ids")) await repo.removeGrants(tx, row.id, "group", dedupe(input.removeGroupIds));
      const changes: NamespaceFieldChange[] = PLAIN_FIELDS.filter((f) => !isDeepStrictEqual(row[f], after[f])).map((field) => ({
        field,
        before: row[field],
        after: after[field],
      }));
      const users = changedGrants(grants.users, fields, dedupe(input.userIds), dedupe(input.removeUserIds), "user_ids");
      const groups = changedGrants(grants.groups, fields, dedupe(input.groupIds), dedupe(input.removeGroupIds), "group_ids");
      changes.push(...[users, groups].filter((c) => c !== undefined));
      if (changes.length > 0) await repo.recordHistory(tx, row, historyOf(principal, "UPDATED", changes));
      return row;
    });
    await this.pruneNowAndThen(updated);
    return this.afterWrite(name);
  }

  /** Deleting a namespace that does not exist succeeds. */
  async delete(principal: Principal, name: string, at = "name"): Promise<void> {
    const violations = new Violations();
    checkName(violations, at, name);
    violations.throwIfAny();
    const deleted = await this.db.transaction().execute(async (tx) => {
      const row = (await this.lockIfPermitted(tx, principal, name, "delete", "NAMESPACE_NOT_DELETEABLE"))?.row;
      if (!row) return false;
      if (await repo.hasServices(tx, row.id)) throw namespaceHasServices(name);
      this.sinceLastPrune.delete(row.id);
      await repo.recordHistory(tx, row, historyOf(principal, "DELETED", []));
      try {
        await repo.deleteNamespace(tx, row.id);
      } catch (error) {
        // A service registered between the check and the delete still holds the namespace.
        if (isForeignKeyViolation(error)) throw namespaceHasServices(name);
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
    const rotated = await this.db.transaction().execute(async (tx) => {
      const row = (await this.lockIfPermitted(tx, principal, name, "rotate the token of", "NAMESPACE_NOT_EDITABLE"))?.row;
      if (!row) throw notFound(`namespace "${name}"`, "NAMESPACE_NOT_FOUND");
      await repo.updateNamespace(tx, row.id, { token });
      // That the token changed, never its value.
      await repo.recordHistory(tx, row, historyOf(principal, "TOKEN_ROTATED", [{ field: "token" }]));
      return row;
    });
    await this.announce(name);
    await this.pruneNowAndThen(rotated);
    return token;
  }

  /**
   * A namespace's changes, newest first, for those who may edit it. A deleted namespace's history
   * (every namespace that had the name and is gone) is read by admins, by its name.
   */
  async listHistory(
    principal: Principal,
    request: { name: string; pageSize: number; pageToken: string },
  ): Promise<{ rows: NamespaceHistoryRow[]; nextPageToken: string }> {
    const violations = new Violations();
    checkName(violations, "name", request.name);
    const { limit, after } = keysetPage(violations, request, HISTORY_PAGES, parseHistoryCursor);
    violations.throwIfAny();
    const record = await this.cache.get(request.name);
    let of: repo.HistoryOf;
    if (record) {
      if (!this.canEdit(principal, record)) {
        throw permissionDenied(`you may not read the history of namespace "${request.name}"`, "NAMESPACE_NOT_EDITABLE");
      }
      of = { live: record };
    } else if (isAdmin(principal)) {
      of = { deletedName: request.name };
    } else {
      throw notFound(`namespace "${request.name}"`, "NAMESPACE_NOT_FOUND");
    }
    const rows = await repo.listHistory(this.db, of, after, limit + 1);
    if ("deletedName" in of && rows.length === 0 && after === undefined) {
      throw notFound(`namespace "${request.name}"`, "NAMESPACE_NOT_FOUND");
    }
    return keysetResult(rows, limit, (row) => row.id);
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
  ): Promise<{ row: NamespaceRow; grants: { users: string[]; groups: string[] } } | undefined> {
    const row = await repo.lockNamespace(tx, name);
    if (!row) return undefined;
    const grants = await repo.grantsOf(tx, row.id);
    if (!this.canEdit(principal, { owners: row.owners, granted_users: grants.users, granted_groups: grants.groups })) {
      throw permissionDenied(`you may not ${action} namespace "${name}"`, reason);
    }
    return { row, grants };
  }

  /** History is trimmed in steps, so a namespace may briefly hold up to a step more than the limit. */
  private async pruneNowAndThen(namespace: { id: string; name: string }): Promise<void> {
    const count = (this.sinceLastPrune.get(namespace.id) ?? 0) + 1;
    if (count < Math.min(PRUNE_EVERY, this.historyLimit)) {
      this.sinceLastPrune.set(namespace.id, count);
      return;
    }
    this.sinceLastPrune.delete(namespace.id);
    await repo.pruneHistory(this.db, namespace, this.historyLimit);
  }

  /** After a committed change: this replica drops the entry at once, every other one before we return. */
  private announce(name: string): Promise<void> {
    return this.cache.announce(name);
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

function historyOf(principal: Principal, action: HistoryInput["action"], changes: NamespaceFieldChange[]): HistoryInput {
  return { action, actor: principal.keyId || TOKEN_ACTOR, accountId: principal.accountId, changes };
}

/** The grant list before and after an update, when the update changed it. */
function changedGrants(
  before: string[],
  fields: Set<UpdatableField>,
  added: string[],
  removed: string[],
  field: "user_ids" | "group_ids",
): NamespaceFieldChange | undefined {
  const after = new Set(before);
  if (fields.has(field)) added.forEach((id) => after.add(id));
  if (fields.has(`remove_${field}`)) removed.forEach((id) => after.delete(id));
  const sortedBefore = [...before].sort();
  const sortedAfter = [...after].sort();
  return isDeepStrictEqual(sortedBefore, sortedAfter) ? undefined : { field, before: sortedBefore, after: sortedAfter };
}

function parseHistoryCursor(value: unknown): number | undefined {
  return Number.isSafeInteger(value) && (value as number) > 0 ? (value as number) : undefined;
}

function newToken(): string {
  return randomBytes(16).toString("hex");
}

function dedupe(values: string[]): string[] {
  return [...new Set(values)];
}
