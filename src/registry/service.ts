import { isDeepStrictEqual } from "node:util";
import type {
  DeregisterInstanceRequest,
  DeleteServiceRequest,
  HeartbeatRequest,
  ListInstancesRequest,
  ListServicesRequest,
  RegisterInstanceRequest,
  UpdateInstanceRequest,
  WatchInstancesRequest,
} from "../../gen/v1/registry_service.js";
import type { Duration } from "../../gen/google/protobuf/duration.js";
import { isAdmin, type Principal } from "../platform/auth.js";
import { checkBatchSize, settle, type BatchResult } from "../platform/batch.js";
import type { Db } from "../platform/db/database.js";
import { Code, notFound, permissionDenied, RpcError, unauthenticated, Violations } from "../platform/errors.js";
import { isUuid } from "../platform/ids.js";
import { pageOf } from "../platform/paging.js";
import type { NamespaceCache } from "../namespaces/cache.js";
import { checkMetadata, checkName } from "../namespaces/rules.js";
import type { ChangeFeed } from "./change-feed.js";
import type { HeartbeatBatcher } from "./heartbeats.js";
import type { InstanceCache } from "./instance-cache.js";
import { InstanceWatch, type WatchEvent } from "./instance-watch.js";
import * as repo from "./repository.js";
import type { InstanceChange, InstanceView, ServiceView } from "./repository.js";

const SERVICE_PATTERN = /^[0-9A-Za-z\-./:_]+$/;
const MAX_SERVICE = 128;
const HOST_PATTERN = /^[0-9A-Za-z\-.:_%[\]]+$/;
const MAX_HOST = 255;
const DEFAULT_WEIGHT = 100;
const MAX_WEIGHT = 10_000;
const DEFAULT_TTL_SECONDS = 5;
const MAX_TTL_SECONDS = 3_600;
const UPDATABLE = ["weight", "metadata", "isolate"] as const;
const MAX_HEARTBEATS_PER_CALL = 1_000;
const SERVICE_PAGES = { defaultSize: 100, maxSize: 1000 };
const DEFAULT_WAIT_MS = 5 * 60_000;
const MAX_WAIT_MS = 10 * 60_000;

export interface RegistryServiceOptions {
  db: Db;
  /** The namespace cache, whose counts registry writes change. */
  namespaces: NamespaceCache;
  heartbeats: HeartbeatBatcher;
  feed: ChangeFeed;
  /** Services and instances in memory, for the lists. */
  instances: InstanceCache;
}

/** The call a blocking query waits in: its signal for waiting (the transport's CallContext.lasting). */
interface WaitingCall {
  lasting(): AbortSignal;
}

/**
 * Services and instances. Writes that change a namespace's counts notify the namespace cache on
 * every replica; heartbeats go through the batcher and notify only when health comes back.
 */
export class RegistryService {
  private readonly db: Db;
  private readonly namespaces: NamespaceCache;
  private readonly heartbeats: HeartbeatBatcher;
  private readonly feed: ChangeFeed;
  private readonly instances: InstanceCache;

  constructor({ db, namespaces, heartbeats, feed, instances }: RegistryServiceOptions) {
    this.db = db;
    this.namespaces = namespaces;
    this.heartbeats = heartbeats;
    this.feed = feed;
    this.instances = instances;
  }

  async register(principal: Principal, request: RegisterInstanceRequest): Promise<InstanceView> {
    const violations = new Violations();
    checkName(violations, "namespace", request.namespace);
    checkServiceName(violations, request.service);
    if (request.host === "") violations.add("host", "is required");
    else if (request.host.length > MAX_HOST) violations.add("host", `must be at most ${MAX_HOST} characters`);
    else if (!HOST_PATTERN.test(request.host)) violations.add("host", "must be a host name or an IP address");
    if (request.port < 1 || request.port > 65_535) violations.add("port", "must be from 1 to 65535");
    if (request.weight > MAX_WEIGHT) violations.add("weight", `must be at most ${MAX_WEIGHT}`);
    if (request.ttlSeconds > MAX_TTL_SECONDS) violations.add("ttl_seconds", `must be at most ${MAX_TTL_SECONDS}`);
    checkMetadata(violations, "metadata", request.metadata);
    violations.throwIfAny();
    this.mayWrite(principal, request.namespace);

    return this.write(request.namespace, async (tx, namespaceId) => {
      const serviceId = await repo.ensureService(tx, namespaceId, request.service);
      const row = await repo.upsertInstance(tx, serviceId, {
        host: request.host,
        port: request.port,
        weight: request.weight || DEFAULT_WEIGHT,
        metadata: request.metadata,
        ttlSeconds: request.ttlSeconds || DEFAULT_TTL_SECONDS,
      });
      return { value: { ...row, service_name: request.service }, changes: [{ instanceId: row.id, kind: "registered" }] };
    });
  }

  async deregister(principal: Principal, request: DeregisterInstanceRequest): Promise<void> {
    checkInstanceAddress(request);
    this.mayWrite(principal, request.namespace);
    await this.write(request.namespace, async (tx, namespaceId) => {
      const instance = await this.instanceOrThrow(tx, namespaceId, request);
      return {
        value: undefined,
        changes: [{ instanceId: instance.id, kind: "deregistered" }],
        deletion: () => repo.deleteInstance(tx, instance.id),
      };
    });
  }

  async heartbeat(principal: Principal, request: HeartbeatRequest, at = ""): Promise<Date> {
    checkInstanceAddress(request, at);
    this.mayWrite(principal, request.namespace);
    const expiresAt = isUuid(request.instanceId)
      ? await this.heartbeats.renew({ instanceId: request.instanceId, namespace: request.namespace, service: request.service })
      : undefined;
    if (!expiresAt) throw instanceNotFound(request);
    return expiresAt;
  }

  /** Heartbeats in one call; they share the batcher's writes with every other heartbeat. */
  async batchHeartbeat(principal: Principal, heartbeats: HeartbeatRequest[]): Promise<BatchResult<Date>[]> {
    checkBatchSize(heartbeats.length, "heartbeats", MAX_HEARTBEATS_PER_CALL);
    return Promise.all(heartbeats.map((h, i) => settle(() => this.heartbeat(principal, h, `heartbeats[${i}].`))));
  }

  async update(principal: Principal, request: UpdateInstanceRequest): Promise<InstanceView> {
    checkInstanceAddress(request);
    const violations = new Violations();
    const mask = request.updateMask ?? [];
    if (mask.length === 0) violations.add("update_mask", "name the fields to change: weight, metadata, isolate");
    mask.forEach((path, i) => {
      if (!(UPDATABLE as readonly string[]).includes(path)) {
        violations.add(`update_mask.paths[${i}]`, `unknown field "${path}"; use weight, metadata or isolate`);
      }
    });
    if (mask.includes("weight") && request.weight > MAX_WEIGHT) violations.add("weight", `must be at most ${MAX_WEIGHT}`);
    if (mask.includes("metadata")) checkMetadata(violations, "metadata", request.metadata);
    violations.throwIfAny();
    this.mayWrite(principal, request.namespace);
    if (mask.includes("isolate") && !isAdmin(principal)) {
      throw permissionDenied("isolating an instance needs the admin scope", "ADMIN_REQUIRED");
    }

    return this.write(request.namespace, async (tx, namespaceId) => {
      const instance = await this.instanceOrThrow(tx, namespaceId, request);
      await repo.updateInstance(tx, instance.id, {
        ...(mask.includes("weight") ? { weight: request.weight } : {}),
        ...(mask.includes("metadata") ? { metadata: request.metadata } : {}),
        ...(mask.includes("isolate") ? { isolate: request.isolate } : {}),
      });
      const updated = (await repo.findInstance(tx, namespaceId, request.service, instance.id))!;
      return { value: updated, changes: changesOfUpdate(instance, updated) };
    });
  }

  /** A blocking query (index and wait) answers once the namespace's index passes the caller's (see waitPast). */
  async listServices(
    principal: Principal,
    request: ListServicesRequest,
    call: WaitingCall,
  ): Promise<{ amount: number; rows: ServiceView[]; index: number }> {
    const violations = new Violations();
    checkName(violations, "namespace", request.namespace);
    const waitMs = blockingWait(violations, request);
    violations.throwIfAny();
    const namespaceId = await this.mayRead(principal, request.namespace);
    const { offset, limit } = pageOf(request, SERVICE_PAGES);
    if (waitMs !== undefined) await this.waitPast(request.namespace, undefined, request.index, waitMs, call);
    // Read before the rows, so the rows are never older than the index.
    const index = this.feed.revisionOf(request.namespace);
    const { views } = await this.instances.services(request.namespace, namespaceId);
    return { amount: views.length, rows: views.slice(offset, offset + limit), index };
  }

  /** A blocking query (index and wait) answers once the service's index passes the caller's (see waitPast). */
  async listInstances(
    principal: Principal,
    request: ListInstancesRequest,
    call: WaitingCall,
  ): Promise<{ rows: readonly InstanceView[]; index: number }> {
    const violations = new Violations();
    checkName(violations, "namespace", request.namespace);
    checkServiceName(violations, request.service);
    const waitMs = blockingWait(violations, request);
    violations.throwIfAny();
    const namespaceId = await this.mayRead(principal, request.namespace);
    if (waitMs !== undefined) await this.waitPast(request.namespace, request.service, request.index, waitMs, call);
    const index = this.feed.revisionOf(request.namespace, request.service);
    const service = (await this.instances.services(request.namespace, namespaceId)).byName.get(request.service);
    if (!service) throw serviceNotFound(request.namespace, request.service);
    return { rows: request.healthyOnly ? service.healthy : service.instances, index };
  }

  /**
   * Waits until the index passes `index`, `waitMs` pass, or the call is over. A shutdown answers at
   * once (with what the list is then); a revoked or expired key ends the call with its error, rather
   * than answering with what changed after it could no longer read.
   */
  private async waitPast(namespace: string, service: string | undefined, index: number, waitMs: number, call: WaitingCall): Promise<void> {
    const signal = call.lasting();
    await this.feed.waitPast(namespace, service, index, waitMs, signal);
    if (signal.aborted && signal.reason instanceof RpcError && signal.reason.code === Code.UNAUTHENTICATED) throw signal.reason;
  }

  async deleteService(principal: Principal, request: DeleteServiceRequest): Promise<void> {
    const violations = new Violations();
    checkName(violations, "namespace", request.namespace);
    checkServiceName(violations, request.service);
    violations.throwIfAny();
    this.mayWrite(principal, request.namespace);
    await this.write(request.namespace, async (tx, namespaceId) => {
      const deletion = async () => {
        if (!(await repo.deleteService(tx, namespaceId, request.service))) throw serviceNotFound(request.namespace, request.service);
      };
      const ids = await repo.instanceIdsOf(tx, namespaceId, request.service);
      if (ids.length > 0) return { value: undefined, changes: ids.map((instanceId): InstanceChange => ({ instanceId, kind: "deregistered" })), deletion };
      // Without instances no instance changes, yet the namespace's services do. Nothing of the service
      // is read to record that, so it goes first: an unknown service is answered before the change is
      // recorded, and never takes the registry's revision lock.
      await deletion();
      return { value: undefined, changes: [{ kind: "service_deleted", namespace: request.namespace, service: request.service }] };
    });
  }

  /**
   * Streams the service's instances to `send` until `signal` aborts, or throws when the caller may
   * no longer read them (token rotated, namespace deleted or no longer exported to it).
   */
  async watch(principal: Principal, request: WatchInstancesRequest, signal: AbortSignal, send: (event: WatchEvent) => Promise<void>): Promise<void> {
    const violations = new Violations();
    checkName(violations, "namespace", request.namespace);
    checkServiceName(violations, request.service);
    violations.throwIfAny();
    const namespaceId = await this.mayRead(principal, request.namespace);
    const token = principal.namespace === undefined ? undefined : (await this.namespaces.get(principal.namespace))?.token;
    const watch = new InstanceWatch({
      db: this.db,
      feed: this.feed,
      request,
      namespaceId,
      signal,
      checkAccess: async () => {
        await this.mayRead(principal, request.namespace);
        if (principal.namespace !== undefined && (await this.namespaces.get(principal.namespace))?.token !== token) {
          throw unauthenticated("the namespace token was rotated", "INVALID_NAMESPACE_TOKEN");
        }
      },
      guards: [...new Set([request.namespace, ...(principal.namespace === undefined ? [] : [principal.namespace])])],
    });
    await watch.run(send);
  }

  /**
   * Runs a change in one transaction that holds the namespace (so it cannot be deleted meanwhile),
   * records the changes it made, then runs its `deletion` (recording reads the rows a change names,
   * so what it deletes must still be there), tells every replica's namespace cache that its counts
   * changed and the change feeds that there is a new revision.
   */
  private async write<T>(
    namespace: string,
    change: (
      tx: Db,
      namespaceId: string,
    ) => Promise<{ value: T; changes: InstanceChange[]; deletion?: () => Promise<void> }>,
  ): Promise<T> {
    const { value, revision } = await this.db.transaction().execute(async (tx) => {
      const namespaceId = await repo.lockNamespaceShared(tx, namespace);
      if (!namespaceId) throw namespaceNotFound(namespace);
      const { value, changes, deletion } = await change(tx, namespaceId);
      const revision = await repo.recordChanges(tx, changes);
      await deletion?.();
      return { value, revision };
    });
    this.instances.invalidate(namespace);
    this.feed.announce(revision);
    await this.namespaces.announce(namespace);
    return value;
  }

  private async instanceOrThrow(
    tx: Db,
    namespaceId: string,
    request: { namespace: string; service: string; instanceId: string },
  ): Promise<InstanceView> {
    const instance = isUuid(request.instanceId)
      ? await repo.findInstance(tx, namespaceId, request.service, request.instanceId)
      : undefined;
    if (!instance) throw instanceNotFound(request);
    return instance;
  }

  /** A namespace token writes only to its own namespace; API keys (namespaces scope) anywhere. */
  private mayWrite(principal: Principal, namespace: string): void {
    if (principal.namespace !== undefined && principal.namespace !== namespace) {
      throw permissionDenied(
        `the token of namespace "${principal.namespace}" cannot change namespace "${namespace}"`,
        "NAMESPACE_TOKEN_MISMATCH",
      );
    }
  }

  /**
   * A namespace token reads its own namespace and those exporting to it (service_export_to holds
   * its name or "*"); API keys read every namespace. Returns the namespace id.
   */
  private async mayRead(principal: Principal, namespace: string): Promise<string> {
    const record = await this.namespaces.get(namespace);
    if (!record) throw namespaceNotFound(namespace);
    const reader = principal.namespace;
    if (
      reader !== undefined &&
      reader !== namespace &&
      !record.service_export_to.includes("*") &&
      !record.service_export_to.includes(reader)
    ) {
      throw permissionDenied(`namespace "${namespace}" does not export its services to "${reader}"`, "NOT_EXPORTED");
    }
    return record.id;
  }
}

/** An update records a change only when it changed something; isolation is told apart. */
function changesOfUpdate(before: InstanceView, after: InstanceView): InstanceChange[] {
  if (before.isolate !== after.isolate) return [{ instanceId: after.id, kind: "isolation_changed" }];
  const same = before.weight === after.weight && isDeepStrictEqual(before.metadata, after.metadata);
  return same ? [] : [{ instanceId: after.id, kind: "updated" }];
}

/**
 * How long a blocking query waits (undefined: it does not block); adds violations for a bad wait.
 * A wait with index 0 (or none) waits past index 0: it blocks only while the namespace's index is 0
 * (a replica that started on a registry with no change yet answers 0 for a namespace without
 * services, and its caller must be able to wait on exactly that), and answers at once otherwise.
 */
function blockingWait(violations: Violations, request: { index: number; wait: Duration | undefined }): number | undefined {
  if (request.wait === undefined) return request.index > 0 ? DEFAULT_WAIT_MS : undefined;
  const ms = request.wait.seconds * 1000 + request.wait.nanos / 1e6;
  if (!(ms > 0) || ms > MAX_WAIT_MS) {
    violations.add("wait", `must be more than 0s and at most ${MAX_WAIT_MS / 1000}s`);
    return undefined;
  }
  return ms;
}

function checkServiceName(violations: Violations, service: string, field = "service"): void {
  if (service === "") violations.add(field, "is required");
  else if (service.length > MAX_SERVICE) violations.add(field, `must be at most ${MAX_SERVICE} characters`);
  else if (!SERVICE_PATTERN.test(service)) violations.add(field, "may contain only letters, digits and - . / : _");
}

/** `at` prefixes the field names, e.g. `heartbeats[3].` in a batch. */
function checkInstanceAddress(request: { namespace: string; service: string; instanceId: string }, at = ""): void {
  const violations = new Violations();
  checkName(violations, `${at}namespace`, request.namespace);
  checkServiceName(violations, request.service, `${at}service`);
  if (request.instanceId === "") violations.add(`${at}instance_id`, "is required");
  violations.throwIfAny();
}

function namespaceNotFound(namespace: string): RpcError {
  return new RpcError(Code.NOT_FOUND, `namespace "${namespace}" not found`, {
    reason: "NAMESPACE_NOT_FOUND",
    fieldViolations: [{ field: "namespace", description: `no namespace "${namespace}"` }],
  });
}

function serviceNotFound(namespace: string, service: string): RpcError {
  return new RpcError(Code.NOT_FOUND, `service "${service}" not found in namespace "${namespace}"`, {
    reason: "SERVICE_NOT_FOUND",
    fieldViolations: [{ field: "service", description: `no service "${service}" in namespace "${namespace}"` }],
  });
}

function instanceNotFound(request: { namespace: string; service: string; instanceId: string }): RpcError {
  return notFound(
    `instance "${request.instanceId}" of service "${request.service}" in namespace "${request.namespace}"`,
    "INSTANCE_NOT_FOUND",
  );
}

export { DEFAULT_TTL_SECONDS };
