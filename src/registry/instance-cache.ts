import { HEARTBEATS_CHANNEL, NAMESPACES_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { Periodic } from "../platform/periodic.js";
import type { ChangeFeed } from "./change-feed.js";
import { loadRegistry, type InstanceView, type ServiceView } from "./repository.js";

/**
 * One service's instances as held in memory, by host and port, all and healthy only. The arrays are
 * replaced, never changed, so a list built from one can be kept with it.
 */
export interface CachedService {
  instances: readonly InstanceView[];
  healthy: readonly InstanceView[];
}

/** A namespace's services, by name and as a list in name order (for ListServices to page through, not copy). */
export interface CachedServices {
  byName: ReadonlyMap<string, CachedService>;
  views: readonly ServiceView[];
  /** Healthy instances of every service, by id, for heartbeats. */
  healthyById: ReadonlyMap<string, InstanceView>;
}

/** A namespace's services, and when they were read. */
interface Entry {
  services: CachedServices;
  loadedAt: number;
  /**
   * False once heartbeats renewed some of its instances: lists read it again (their times moved),
   * while heartbeats may still go by it (a renewal of a healthy instance changes no health).
   */
  current: boolean;
}

/**
 * Each namespace's services and instances in memory, so ListServices and ListInstances do not
 * query per call and heartbeats of healthy instances need no statement of their own. Registry writes
 * on any replica send the namespace's name on NAMESPACES_CHANNEL, and the entry is dropped; heartbeat
 * batches send it on HEARTBEATS_CHANNEL, and lists read the entry again on next use, so
 * `last_heartbeat_at` lags by at most one heartbeat flush and its notice. Per-name epochs keep a read
 * racing a change from storing what it read before the change; callers missing at once share one
 * read. A notice can be lost (a writer that dies between commit and notice), so an entry is also
 * never served for longer than two check intervals.
 */
export class InstanceCache {
  private readonly entries = new Map<string, Entry>();
  /** Per name, changes and renewals since start: a read stores what it read only when no change came meanwhile. */
  private readonly epochs = new Map<string, { changed: number; renewed: number }>();
  private readonly loading = new Map<string, Promise<CachedServices>>();
  private readonly checks: Periodic;
  private intervalMs = 0;

  constructor(
    private readonly db: Db,
    notifications: Notifications,
    feed: ChangeFeed,
    private readonly logger: Logger,
  ) {
    // The feed may hear of a change before the namespace notice arrives; a blocking query woken by
    // it must not be answered from rows older than the change.
    feed.onChange((change) => this.invalidate(change.namespace));
    notifications.on(NAMESPACES_CHANNEL, (name) => this.invalidate(name));
    notifications.on(HEARTBEATS_CHANNEL, (names) => {
      for (const name of names.split("\n")) this.renewed(name);
    });
    notifications.onReconnect(() => {
      for (const name of [...this.entries.keys()]) this.invalidate(name);
    });
    this.checks = new Periodic(async () => this.dropOlderThan(performance.now() - this.intervalMs), logger, "instance_cache_check_failed");
  }

  /** Starts dropping entries older than `intervalMs` every `intervalMs`. */
  startChecks(intervalMs: number): void {
    this.intervalMs = intervalMs;
    this.checks.start(intervalMs);
  }

  async stopChecks(): Promise<void> {
    await this.checks.stop();
  }

  invalidate(name: string): void {
    this.epochOf(name).changed++;
    this.loading.delete(name);
    this.entries.delete(name);
  }

  /** Heartbeats renewed instances of the namespace: their times moved, their health did not. */
  renewed(name: string): void {
    // A read under way is still shared: what it returns is right but for those times.
    this.epochOf(name).renewed++;
    const entry = this.entries.get(name);
    if (entry) entry.current = false;
  }

  /** The namespace's services, by name and in name order. */
  async services(name: string, namespaceId: string): Promise<CachedServices> {
    const hit = this.entries.get(name);
    if (hit?.current) return hit.services;
    const pending = this.loading.get(name);
    if (pending) return pending;
    const load = this.load(name, namespaceId).finally(() => {
      if (this.loading.get(name) === load) this.loading.delete(name);
    });
    this.loading.set(name, load);
    return load;
  }

  /**
   * The instance, when it is healthy and in that service by what this replica holds in memory
   * (renewals since the read aside); undefined also when the namespace is not held.
   */
  healthyInstance(name: string, service: string, instanceId: string): InstanceView | undefined {
    const instance = this.entries.get(name)?.services.healthyById.get(instanceId);
    return instance?.service_name === service ? instance : undefined;
  }

  /** Reads the namespace in the background unless it is held or being read; a failure is only logged. */
  warm(name: string, namespaceId: string): void {
    if (this.entries.has(name) || this.loading.has(name)) return;
    this.services(name, namespaceId).catch((error: unknown) =>
      this.logger.warn({ event: "instance_cache_load_failed", namespace: name, err: error }, "could not read a namespace's instances"),
    );
  }

  private async load(name: string, namespaceId: string): Promise<CachedServices> {
    const epoch = this.epochOf(name);
    const { changed, renewed } = epoch;
    const { services, instances } = await loadRegistry(this.db, namespaceId);
    const byService = Map.groupBy(instances, (i) => i.service_name);
    const byName = new Map<string, CachedService>();
    const views: ServiceView[] = [];
    const healthyById = new Map<string, InstanceView>();
    for (const service of services) {
      const own = byService.get(service.name) ?? [];
      const healthy = own.filter(isHealthy);
      byName.set(service.name, { instances: own, healthy });
      views.push({ name: service.name, created_at: service.created_at, instance_count: own.length, healthy_instance_count: healthy.length });
      for (const instance of healthy) healthyById.set(instance.id, instance);
    }
    // Renewals during the read leave its health right, and only its times perhaps old: heartbeats
    // may go by it, lists read again. With several replicas flushing, a read rarely sees none.
    const entry: Entry = { services: { byName, views, healthyById }, loadedAt: performance.now(), current: epoch.renewed === renewed };
    if (epoch.changed === changed) this.entries.set(name, entry);
    return entry.services;
  }

  private epochOf(name: string): { changed: number; renewed: number } {
    let epoch = this.epochs.get(name);
    if (!epoch) this.epochs.set(name, (epoch = { changed: 0, renewed: 0 }));
    return epoch;
  }

  private dropOlderThan(time: number): void {
    for (const [name, entry] of this.entries) if (entry.loadedAt < time) this.entries.delete(name);
  }
}

/** Counted as healthy, and listed by healthy_only: heartbeats within the TTL and not isolated. */
export function isHealthy(instance: InstanceView): boolean {
  return instance.healthy && !instance.isolate;
}
