import { sql } from "kysely";
import { prepared, withoutFlushWait, type Db } from "../platform/db/database.js";
import type { InstanceChangeKind, InstanceRow, RegistryChangeRow, ServiceRow } from "../platform/db/schema.js";

/** A service as listed: its name and creation time with the live counts of its instances. */
export type ServiceView = Pick<ServiceRow, "name" | "created_at"> & { instance_count: number; healthy_instance_count: number };

/** An instance row with the name of its service. */
export type InstanceView = InstanceRow & { service_name: string };

/** The namespace's id, share-locked for the transaction so it cannot be deleted underneath. */
export async function lockNamespaceShared(db: Db, name: string): Promise<string | undefined> {
  const row = await db.selectFrom("namespaces").select("id").where("name", "=", name).forShare().executeTakeFirst();
  return row?.id;
}

/** The service's id, creating the service when it is new. */
export async function ensureService(db: Db, namespaceId: string, name: string): Promise<string> {
  const inserted = await db
    .insertInto("services")
    .values({ namespace_id: namespaceId, name })
    .onConflict((oc) => oc.columns(["namespace_id", "name"]).doNothing())
    .returning("id")
    .executeTakeFirst();
  if (inserted) return inserted.id;
  const row = await db
    .selectFrom("services")
    .select("id")
    .where("namespace_id", "=", namespaceId)
    .where("name", "=", name)
    .executeTakeFirstOrThrow();
  return row.id;
}

export interface InstanceInput {
  host: string;
  port: number;
  weight: number;
  metadata: Record<string, string>;
  ttlSeconds: number;
}

/** Inserts the instance, or updates the one at the same host and port; either way it is healthy now. */
export async function upsertInstance(db: Db, serviceId: string, input: InstanceInput): Promise<InstanceRow> {
  return db
    .insertInto("instances")
    .values({
      service_id: serviceId,
      host: input.host,
      port: input.port,
      weight: input.weight,
      metadata: JSON.stringify(input.metadata),
      ttl_seconds: input.ttlSeconds,
      healthy: true,
      last_heartbeat_at: sql<Date>`now()`,
      expires_at: sql<Date>`now() + make_interval(secs => ${input.ttlSeconds})`,
    })
    .onConflict((oc) =>
      oc.columns(["service_id", "host", "port"]).doUpdateSet((eb) => ({
        weight: eb.ref("excluded.weight"),
        metadata: eb.ref("excluded.metadata"),
        ttl_seconds: eb.ref("excluded.ttl_seconds"),
        healthy: true,
        last_heartbeat_at: sql<Date>`now()`,
        expires_at: eb.ref("excluded.expires_at"),
      })),
    )
    .returningAll()
    .executeTakeFirstOrThrow();
}

function instancesIn(db: Db, namespaceId: string) {
  return db
    .selectFrom("instances as i")
    .innerJoin("services as s", "s.id", "i.service_id")
    .selectAll("i")
    .select("s.name as service_name")
    .where("s.namespace_id", "=", namespaceId);
}

export async function findInstance(
  db: Db,
  namespaceId: string,
  service: string,
  instanceId: string,
): Promise<InstanceView | undefined> {
  return instancesIn(db, namespaceId).where("s.name", "=", service).where("i.id", "=", instanceId).executeTakeFirst();
}

export async function listInstances(
  db: Db,
  namespaceId: string,
  service: string,
  healthyOnly: boolean,
): Promise<InstanceView[]> {
  let query = instancesIn(db, namespaceId).where("s.name", "=", service);
  if (healthyOnly) query = query.where("i.healthy", "=", true).where("i.isolate", "=", false);
  return query.orderBy("i.host").orderBy("i.port").execute();
}

export async function deleteInstance(db: Db, instanceId: string): Promise<void> {
  await db.deleteFrom("instances").where("id", "=", instanceId).execute();
}

export async function updateInstance(
  db: Db,
  instanceId: string,
  patch: { weight?: number; metadata?: Record<string, string>; isolate?: boolean },
): Promise<void> {
  await db
    .updateTable("instances")
    .set({
      ...(patch.weight !== undefined ? { weight: patch.weight } : {}),
      ...(patch.metadata !== undefined ? { metadata: JSON.stringify(patch.metadata) } : {}),
      ...(patch.isolate !== undefined ? { isolate: patch.isolate } : {}),
    })
    .where("id", "=", instanceId)
    .execute();
}

/** Every service of the namespace by name, and every instance by service, host and port. */
export async function loadRegistry(db: Db, namespaceId: string): Promise<{ services: ServiceRow[]; instances: InstanceView[] }> {
  const [services, instances] = await Promise.all([
    db.selectFrom("services").selectAll().where("namespace_id", "=", namespaceId).orderBy("name").execute(),
    instancesIn(db, namespaceId).orderBy("s.name").orderBy("i.host").orderBy("i.port").execute(),
  ]);
  return { services, instances };
}

/** Deletes the service and (by cascade) its instances; false when there was no such service. */
export async function deleteService(db: Db, namespaceId: string, service: string): Promise<boolean> {
  const row = await db
    .deleteFrom("services")
    .where("namespace_id", "=", namespaceId)
    .where("name", "=", service)
    .returning("id")
    .executeTakeFirst();
  return row !== undefined;
}

export interface HeartbeatTarget {
  instanceId: string;
  namespace: string;
  service: string;
}

export interface HeartbeatOutcome {
  instanceId: string;
  namespace: string;
  namespaceId: string;
  service: string;
  expiresAt: Date;
  /** The instance was unhealthy before this heartbeat. */
  revived: boolean;
}

/** What renewInstances did: the instances it renewed, and those it found but left alone. */
export interface Renewals {
  renewed: HeartbeatOutcome[];
  /** Ids of instances found in their namespace and service and not renewed (not healthy, with `healthyOnly`). */
  leftAlone: string[];
}

/**
 * Renews many instances in one statement; with `healthyOnly`, only those that are healthy now (their
 * renewal changes nothing a watcher sees, so it needs no change record and no transaction of its
 * own). Rows are locked in id order so concurrent batches (from several replicas) cannot deadlock;
 * an instance is renewed only when it belongs to the named namespace and service. The instances
 * found but not renewed are told apart from those not found at all, which need nothing more.
 */
export async function renewInstances(db: Db, targets: HeartbeatTarget[], { healthyOnly }: { healthyOnly: boolean }): Promise<Renewals> {
  // Two fixed texts, each prepared once per connection: planning cost a third of the statement.
  const result = await sql<{ id: string; namespace: string; namespace_id: string; service: string; expires_at: Date | null; was_healthy: boolean }>`${prepared(healthyOnly ? "renew_healthy_instances" : "renew_instances")}
    with req as (
      select * from unnest(${targets.map((t) => t.instanceId)}::uuid[], ${targets.map((t) => t.namespace)}::text[],
                           ${targets.map((t) => t.service)}::text[]) as r(id, ns, svc)
    ), found as (
      select i.id, n.name as namespace, n.id as namespace_id, s.name as service
      from instances i
      join services s on s.id = i.service_id
      join namespaces n on n.id = s.namespace_id
      join req on req.id = i.id and req.ns = n.name and req.svc = s.name
    ), prev as (
      select i.id, i.healthy, found.namespace, found.namespace_id, found.service
      from instances i
      join found on found.id = i.id
      where ${healthyOnly ? sql`i.healthy` : sql`true`}
      order by i.id
      for update of i
    ), renewed as (
      update instances i
      set last_heartbeat_at = now(), expires_at = now() + make_interval(secs => i.ttl_seconds), healthy = true
      from prev
      where i.id = prev.id
        -- A heartbeat lost in a crash costs at most one TTL of health: its transaction (the change
        -- record included) commits without waiting for the disk.
        and ${withoutFlushWait}
      returning i.id, prev.namespace, prev.namespace_id, prev.service, i.expires_at, prev.healthy as was_healthy
    )
    select id, namespace, namespace_id, service, expires_at, was_healthy from renewed
    union all
    select id, namespace, namespace_id, service, null, false from found where id not in (select id from renewed)`.execute(db);
  const renewed: HeartbeatOutcome[] = [];
  const leftAlone: string[] = [];
  for (const r of result.rows) {
    if (r.expires_at === null) leftAlone.push(r.id);
    else renewed.push({ instanceId: r.id, namespace: r.namespace, namespaceId: r.namespace_id, service: r.service, expiresAt: r.expires_at, revived: !r.was_healthy });
  }
  return { renewed, leftAlone };
}

/** Marks instances whose TTL ran out unhealthy; returns them with their namespaces. */
export async function expireInstances(db: Db, limit: number): Promise<{ id: string; namespace: string }[]> {
  const result = await sql<{ id: string; namespace: string }>`
    with expired as (
      select id from instances where healthy and expires_at < now()
      order by id limit ${limit} for update skip locked
    ), flipped as (
      update instances i set healthy = false from expired where i.id = expired.id returning i.id, i.service_id
    )
    select f.id, n.name as namespace
    from flipped f join services s on s.id = f.service_id join namespaces n on n.id = s.namespace_id`.execute(db);
  return result.rows;
}

export async function instanceIdsOf(db: Db, namespaceId: string, service: string): Promise<string[]> {
  const rows = await instancesIn(db, namespaceId).where("s.name", "=", service).select("i.id").execute();
  return rows.map((r) => r.id);
}

/** A change to one instance, or the deletion of a service that had none (which no instance change would show). */
export type InstanceChange =
  | { instanceId: string; kind: InstanceChangeKind }
  | { kind: "service_deleted"; namespace: string; service: string };

/**
 * Records the changes under new revisions, one each: an instance as it stands in this transaction,
 * a deleted service by its names. Taking the revisions locks the revision row until commit, so this
 * is the transaction's last statement (a deletion runs right after, since the instances it names
 * must still be there). Returns the last revision, if any was taken.
 */
export async function recordChanges(db: Db, changes: InstanceChange[]): Promise<number | undefined> {
  if (changes.length === 0) return undefined;
  const of = (change: InstanceChange) => ("instanceId" in change ? { id: change.instanceId, ns: null, svc: null } : { id: null, ns: change.namespace, svc: change.service });
  const rows = changes.map(of);
  const result = await sql<{ revision: number }>`
    with req as (
      select * from unnest(${rows.map((r) => r.id)}::uuid[], ${changes.map((c) => c.kind)}::text[],
                           ${rows.map((r) => r.ns)}::text[], ${rows.map((r) => r.svc)}::text[])
        with ordinality as r(id, kind, ns, svc, ord)
    ), rev as (
      update registry_revision set revision = revision + ${changes.length} returning revision
    ), ins as (
      insert into registry_changes (revision, namespace, service, kind, instance)
      select rev.revision - ${changes.length} + req.ord, coalesce(n.name, req.ns), coalesce(s.name, req.svc), req.kind,
             case when req.id is null then '{}'::jsonb else to_jsonb(i) || jsonb_build_object('service_name', s.name) end
      from req cross join rev
      left join instances i on i.id = req.id left join services s on s.id = i.service_id left join namespaces n on n.id = s.namespace_id
      where req.id is null or i.id is not null
    )
    select revision from rev`.execute(db);
  return result.rows[0]?.revision;
}

/** The last revision handed out, and the newest one whose change is no longer kept. */
export async function revisionState(db: Db): Promise<{ revision: number; pruned_through: number }> {
  return db.selectFrom("registry_revision").select(["revision", "pruned_through"]).executeTakeFirstOrThrow();
}

/** A recorded change to an instance, the instance read back into a row. */
export type InstanceChangeView = Omit<RegistryChangeRow, "instance" | "created_at" | "kind"> & { kind: InstanceChangeKind; instance: InstanceView };

/** A recorded change: to an instance, or the deletion of a service that had none. */
export type ChangeView = InstanceChangeView | (Omit<RegistryChangeRow, "instance" | "created_at" | "kind"> & { kind: "service_deleted" });

/** Changes after `after`, oldest first, of one service or (without it) of all; only committed ones. */
export async function changesSince(
  db: Db,
  after: number,
  limit: number,
  of?: { namespace: string; service: string },
): Promise<ChangeView[]> {
  let query = db
    .selectFrom("registry_changes")
    .select(["revision", "namespace", "service", "kind", "instance"])
    .where("revision", ">", after)
    .where("revision", "<=", db.selectFrom("registry_revision").select("revision"))
    .orderBy("revision")
    .limit(limit);
  if (of) query = query.where("namespace", "=", of.namespace).where("service", "=", of.service);
  const rows = await query.execute();
  return rows.map(({ instance, kind, ...row }) =>
    kind === "service_deleted" ? { ...row, kind } : { ...row, kind, instance: instanceFromJson(instance) },
  );
}

/** Drops changes beyond the newest `keep`, and those older than `maxAgeSeconds`. */
export async function pruneChanges(db: Db, keep: number, maxAgeSeconds: number): Promise<void> {
  await sql`
    with cut as (
      select greatest(
        (select revision from registry_revision) - ${keep},
        (select coalesce(max(revision), 0) from registry_changes
          where created_at < now() - make_interval(secs => ${maxAgeSeconds}))) as through
    ), gone as (
      delete from registry_changes where revision <= (select through from cut)
    )
    update registry_revision set pruned_through = (select through from cut)
    where pruned_through < (select through from cut)`.execute(db);
}

function instanceFromJson(json: Record<string, unknown>): InstanceView {
  const row = json as unknown as InstanceView & Record<"last_heartbeat_at" | "expires_at" | "created_at", string>;
  return {
    ...row,
    last_heartbeat_at: new Date(row.last_heartbeat_at),
    expires_at: new Date(row.expires_at),
    created_at: new Date(row.created_at),
  };
}
