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
}

/** A namespace's services, and when they were read. */
interface Entry {
  services: CachedServices;
  loadedAt: number;
}

/**
 * Each namespace's services and instances in memory, so ListServices and ListInstances do not
 * query per call. Registry writes on any replica send the namespace's name on NAMESPACES_CHANNEL
 * and heartbeat batches on HEARTBEATS_CHANNEL; the entry is dropped and read again on next use, so
 * `last_heartbeat_at` lags by at most one heartbeat batch and its notice. Per-name epochs keep a
 * read racing a change from storing what it read before the change; callers missing at once share
 * one read. A notice can be lost (a writer that dies between commit and notice), so an entry is
 * also never served for longer than two check intervals.
 */
export class InstanceCache {
  private readonly entries = new Map<string, Entry>();
  private readonly epochs = new Map<string, number>();
  private readonly loading = new Map<string, Promise<CachedServices>>();
  private readonly checks: Periodic;
  private intervalMs = 0;

  constructor(
    private readonly db: Db,
    notifications: Notifications,
    feed: ChangeFeed,
    logger: Logger,
  ) {
    // The feed may hear of a change before the namespace notice arrives; a blocking query woken by
    // it must not be answered from rows older than the change.
    feed.onChange((change) => this.invalidate(change.namespace));
    notifications.on(NAMESPACES_CHANNEL, (name) => this.invalidate(name));
    notifications.on(HEARTBEATS_CHANNEL, (names) => {
      for (const name of names.split("\n")) this.invalidate(name);
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
    this.epochs.set(name, (this.epochs.get(name) ?? 0) + 1);
    this.loading.delete(name);
    this.entries.delete(name);
  }

  /** The namespace's services, by name and in name order. */
  async services(name: string, namespaceId: string): Promise<CachedServices> {
    const hit = this.entries.get(name);
    if (hit) return hit.services;
    const pending = this.loading.get(name);
    if (pending) return pending;
    const load = this.load(name, namespaceId).finally(() => {
      if (this.loading.get(name) === load) this.loading.delete(name);
    });
    this.loading.set(name, load);
    return load;
  }

  private async load(name: string, namespaceId: string): Promise<CachedServices> {
    const epoch = this.epochs.get(name) ?? 0;
    const { services, instances } = await loadRegistry(this.db, namespaceId);
    const byService = Map.groupBy(instances, (i) => i.service_name);
    const byName = new Map<string, CachedService>();
    const views: ServiceView[] = [];
    for (const service of services) {
      const own = byService.get(service.name) ?? [];
      const healthy = own.filter(isHealthy);
      byName.set(service.name, { instances: own, healthy });
      views.push({ name: service.name, created_at: service.created_at, instance_count: own.length, healthy_instance_count: healthy.length });
    }
    const entry: Entry = { services: { byName, views }, loadedAt: performance.now() };
    if ((this.epochs.get(name) ?? 0) === epoch) this.entries.set(name, entry);
    return entry.services;
  }

  private dropOlderThan(time: number): void {
    for (const [name, entry] of this.entries) if (entry.loadedAt < time) this.entries.delete(name);
  }
}

/** Counted as healthy, and listed by healthy_only: heartbeats within the TTL and not isolated. */
export function isHealthy(instance: InstanceView): boolean {
  return instance.healthy && !instance.isolate;
}
