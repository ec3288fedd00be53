import { sql } from "kysely";
import { prepared, type Db } from "../platform/db/database.js";
import type { NamespaceAction, NamespaceFieldChange, NamespaceHistoryRow, NamespaceRow } from "../platform/db/schema.js";

/** A namespace row with its grants and the live counts of its services and instances. */
export type NamespaceView = NamespaceRow & {
  granted_users: string[];
  granted_groups: string[];
  service_count: number;
  instance_count: number;
  healthy_instance_count: number;
};

/** Loads namespaces (all of them, or those named) with grants and counts, in one query. */
export async function loadNamespaces(db: Db, names?: string[]): Promise<NamespaceView[]> {
  let query = db
    .selectFrom("namespaces as n")
    .selectAll("n")
    .select([
      sql<string[]>`coalesce((select array_agg(g.principal_id order by g.principal_id) from namespace_grants g
        where g.namespace_id = n.id and g.principal_kind = 'user'), '{}')`.as("granted_users"),
      sql<string[]>`coalesce((select array_agg(g.principal_id order by g.principal_id) from namespace_grants g
        where g.namespace_id = n.id and g.principal_kind = 'group'), '{}')`.as("granted_groups"),
      sql<number>`(select count(*) from services s where s.namespace_id = n.id)`.as("service_count"),
      sql<number>`(select count(*) from instances i join services s on s.id = i.service_id
        where s.namespace_id = n.id)`.as("instance_count"),
      sql<number>`(select count(*) from instances i join services s on s.id = i.service_id
        where s.namespace_id = n.id and i.healthy and not i.isolate)`.as("healthy_instance_count"),
    ]);
  if (names !== undefined) {
    if (names.length === 0) return [];
    // One array parameter, however many names: a list of parameters stops at 65,535.
    query = query.where(sql<boolean>`n.name = any(${names}::text[])`);
  }
  return query.execute();
}

/** Totals that change whenever anything a cached namespace shows changes. */
export interface RegistryFingerprint {
  namespaces: number;
  newestUpdate: number;
  services: number;
  instances: number;
  healthyInstances: number;
}

export async function registryFingerprint(db: Db): Promise<RegistryFingerprint> {
  const { rows } = await sql<{ n: number; m: Date | null; s: number; i: number; h: number }>`
    select (select count(*) from namespaces) as n, (select max(updated_at) from namespaces) as m,
           (select count(*) from services) as s, (select count(*) from instances) as i,
           (select count(*) from instances where healthy and not isolate) as h`.execute(db);
  const row = rows[0]!;
  return { namespaces: row.n, newestUpdate: row.m?.getTime() ?? 0, services: row.s, instances: row.i, healthyInstances: row.h };
}

export interface NewNamespace {
  name: string;
  comment: string | null;
  owners: string;
  token: string;
  serviceExportTo: string[];
  metadata: Record<string, string>;
  syncToGlobalRegistry: boolean;
  createdBy: string | null;
}

/** Who made a change and what it changed, as the history records it. */
export interface HistoryInput {
  action: NamespaceAction;
  actor: string;
  accountId: string;
  changes: NamespaceFieldChange[];
}

/** A namespace to create, with its grants and its CREATED history entry. */
export interface NamespaceInsert {
  namespace: NewNamespace;
  grants: { users: string[]; groups: string[] };
  history: HistoryInput;
}

/**
 * Inserts namespaces, each with its grants and its CREATED history entry, in one statement (so
 * atomically, in one round trip and one commit). Resolves with each item's row, in the items' order,
 * or undefined where the name was taken, by a namespace or by an earlier item.
 */
export async function insertNamespaces(db: Db, items: NamespaceInsert[]): Promise<(NamespaceRow | undefined)[]> {
  const ns = items.map((item) => item.namespace);
  // Each grant names its item by the item's ordinality (counted from 1).
  const grants = items.flatMap(({ grants: { users, groups } }, i) => [
    ...users.map((id) => ({ n: i + 1, kind: "user", id })),
    ...groups.map((id) => ({ n: i + 1, kind: "group", id })),
  ]);
  const { rows } = await sql<NamespaceRow>`${prepared("namespace_insert")}
    with input as (
      select * from unnest(
        ${ns.map((n) => n.name)}::text[], ${ns.map((n) => n.comment)}::text[], ${ns.map((n) => n.owners)}::text[],
        ${ns.map((n) => n.token)}::text[], ${ns.map((n) => JSON.stringify(n.serviceExportTo))}::jsonb[],
        ${ns.map((n) => JSON.stringify(n.metadata))}::jsonb[], ${ns.map((n) => n.syncToGlobalRegistry)}::boolean[],
        ${ns.map((n) => n.createdBy)}::uuid[], ${items.map((i) => i.history.action)}::text[],
        ${items.map((i) => i.history.actor)}::text[], ${items.map((i) => i.history.accountId)}::text[],
        ${items.map((i) => JSON.stringify(i.history.changes))}::jsonb[]
      ) with ordinality as t(name, comment, owners, token, export_to, metadata, sync, created_by,
                             action, actor, account_id, changes, n)
    ), ns as (
      insert into namespaces (name, comment, owners, token, service_export_to, metadata, sync_to_global_registry, created_by)
      select name, comment, owners, token, array(select jsonb_array_elements_text(export_to)), metadata, sync, created_by
      -- In name order: two statements (two replicas) inserting the same names wait for each other's
      -- uncommitted names, and in different orders that deadlocked. The first of a repeated name wins.
      from input order by name, n
      on conflict (name) do nothing
      returning *
    ), created as (
      -- Tokens are random, so they tell which item each inserted row came from; names may repeat.
      select ns.id, ns.name, input.n, input.action, input.actor, input.account_id, input.changes
      from ns join input on input.token = ns.token
    ), grants as (
      insert into namespace_grants (namespace_id, principal_kind, principal_id)
      select created.id, g.kind, g.id
      from unnest(${grants.map((g) => g.n)}::bigint[], ${grants.map((g) => g.kind)}::text[], ${grants.map((g) => g.id)}::text[])
           as g(n, kind, id)
      join created on created.n = g.n
    ), history as (
      insert into namespace_history (namespace_id, namespace_name, action, actor, account_id, changes)
      select id, name, action, actor, account_id, changes from created
    )
    select * from ns`.execute(db);
  const byToken = new Map(rows.map((row) => [row.token, row]));
  return ns.map((n) => byToken.get(n.token));
}

/** Locks the namespace row for the rest of the transaction. */
export async function lockNamespace(db: Db, name: string): Promise<NamespaceRow | undefined> {
  return db.selectFrom("namespaces").selectAll().where("name", "=", name).forUpdate().executeTakeFirst();
}

export interface NamespacePatch {
  comment?: string | null;
  owners?: string;
  serviceExportTo?: string[];
  metadata?: Record<string, string>;
  syncToGlobalRegistry?: boolean;
  token?: string;
}

export async function updateNamespace(db: Db, id: string, patch: NamespacePatch): Promise<void> {
  await db
    .updateTable("namespaces")
    .set({
      ...(patch.comment !== undefined ? { comment: patch.comment } : {}),
      ...(patch.owners !== undefined ? { owners: patch.owners } : {}),
      ...(patch.serviceExportTo !== undefined ? { service_export_to: patch.serviceExportTo } : {}),
      ...(patch.metadata !== undefined ? { metadata: JSON.stringify(patch.metadata) } : {}),
      ...(patch.syncToGlobalRegistry !== undefined ? { sync_to_global_registry: patch.syncToGlobalRegistry } : {}),
      ...(patch.token !== undefined ? { token: patch.token } : {}),
      updated_at: sql<Date>`now()`,
    })
    .where("id", "=", id)
    .execute();
}

export async function addGrants(db: Db, namespaceId: string, kind: "user" | "group", ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  await db
    .insertInto("namespace_grants")
    .values(ids.map((principal_id) => ({ namespace_id: namespaceId, principal_kind: kind, principal_id })))
    .onConflict((oc) => oc.doNothing())
    .execute();
}

export async function removeGrants(db: Db, namespaceId: string, kind: "user" | "group", ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  await db
    .deleteFrom("namespace_grants")
    .where("namespace_id", "=", namespaceId)
    .where("principal_kind", "=", kind)
    .where("principal_id", "in", ids)
    .execute();
}

export async function grantsOf(db: Db, namespaceId: string): Promise<{ users: string[]; groups: string[] }> {
  const rows = await db
    .selectFrom("namespace_grants")
    .select(["principal_kind", "principal_id"])
    .where("namespace_id", "=", namespaceId)
    .execute();
  return {
    users: rows.filter((r) => r.principal_kind === "user").map((r) => r.principal_id),
    groups: rows.filter((r) => r.principal_kind === "group").map((r) => r.principal_id),
  };
}

export async function hasServices(db: Db, namespaceId: string): Promise<boolean> {
  const row = await db
    .selectFrom("services")
    .select("id")
    .where("namespace_id", "=", namespaceId)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

export async function deleteNamespace(db: Db, id: string): Promise<void> {
  await db.deleteFrom("namespaces").where("id", "=", id).execute();
}

export async function recordHistory(db: Db, namespace: { id: string; name: string }, entry: HistoryInput): Promise<void> {
  await db
    .insertInto("namespace_history")
    .values({
      namespace_id: namespace.id,
      namespace_name: namespace.name,
      action: entry.action,
      actor: entry.actor,
      account_id: entry.accountId,
      changes: JSON.stringify(entry.changes),
    })
    .execute();
}

/** Which namespace's history to read: a live one, or every deleted one of a name. */
export type HistoryOf = { live: { id: string; name: string } } | { deletedName: string };

/** History entries newest first, after the entry with id `after` when given. */
export async function listHistory(db: Db, of: HistoryOf, after: number | undefined, limit: number): Promise<NamespaceHistoryRow[]> {
  let query = db.selectFrom("namespace_history").selectAll();
  query =
    "live" in of
      ? query.where("namespace_name", "=", of.live.name).where("namespace_id", "=", of.live.id)
      : query
          .where("namespace_name", "=", of.deletedName)
          .where(({ not, exists, selectFrom }) =>
            not(exists(selectFrom("namespaces").select("id").whereRef("namespaces.id", "=", "namespace_history.namespace_id"))),
          );
  if (after !== undefined) query = query.where("id", "<", after);
  return query.orderBy("id", "desc").limit(limit).execute();
}

/** Keeps the newest `keep` entries of a namespace. */
export async function pruneHistory(db: Db, namespace: { id: string; name: string }, keep: number): Promise<void> {
  await sql`
    delete from namespace_history
    where namespace_name = ${namespace.name} and namespace_id = ${namespace.id} and id < (
      select id from namespace_history where namespace_name = ${namespace.name} and namespace_id = ${namespace.id}
      order by id desc offset ${keep - 1} limit 1
    )`.execute(db);
}
