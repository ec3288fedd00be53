import { NAMESPACES_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { Periodic } from "../platform/periodic.js";
import { loadNamespaces, registryFingerprint, type NamespaceView, type RegistryFingerprint } from "./repository.js";

/** How long a mismatch may be explained by notices still on their way before the cache is dropped. */
const SETTLE_MS = 1_000;
/** Invalidations remembered beyond twice the names cached (see forgetInvalidations). */
const INVALIDATIONS_KEPT = 10_000;

/** A read of stale names in flight: which, from which epoch (see keeps), and what it found by name. */
interface Refresh {
  names: Set<string>;
  epoch: number;
  done: Promise<Map<string, NamespaceView>>;
}

/**
 * Every namespace in memory, so Get and List never touch the database on the hot path. Writes on
 * any replica send the changed name on NAMESPACES_CHANNEL; the entry is dropped and re-read on next
 * use. `epoch` counts invalidations so that a read racing a write never stores what it read before
 * the write. A notice can be lost (a writer that dies between its commit and its notice), so the
 * cache also compares its totals with the database's now and then and drops itself on a mismatch.
 */
export class NamespaceCache {
  private readonly byName = new Map<string, NamespaceView>();
  /** Names changed since the full load; re-read before the next List. */
  private readonly stale = new Set<string>();
  private complete = false;
  private epoch = 0;
  private sorted: NamespaceView[] | undefined;
  private readonly byToken = new Map<string, NamespaceView>();
  /** Reads of one name in flight, shared by callers that miss at once (a thousand watchers re-checking access after one notice). */
  private readonly loading = new Map<string, Promise<NamespaceView | undefined>>();
  /** The re-reads of stale names in flight (see refreshStale). */
  private readonly refreshes = new Set<Refresh>();
  /** The read of every namespace in flight, and the epoch it began at. */
  private loadingAll: { epoch: number; done: Promise<NamespaceView[]> } | undefined;
  /** The epoch of each name's last invalidation since `floor` (see keeps). */
  private readonly invalidatedAt = new Map<string, number>();
  /** Reads begun before this epoch keep nothing: the cache started over, or forgot invalidatedAt. */
  private floor = 0;

  private readonly checks: Periodic;
  private readonly changeListeners = new Set<(name: string | undefined) => void>();
  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly logger: Logger,
  ) {
    // Its own echo drops the entry again (a read may have stored what it read before another replica's
    // change) but tells no listener, which heard of the change when it was announced.
    notifications.on(NAMESPACES_CHANNEL, (name, own) => this.invalidate(name, !own));
    notifications.onReconnect(() => this.clear());
    this.checks = new Periodic(() => this.check(), logger, "namespace_cache_check_failed");
  }

  /**
   * Fills the cache at once (the first check of an incomplete cache reads every namespace), then
   * compares it with the database every `intervalMs`: a replica just started answers its first
   * GetNamespace calls from memory rather than with a read of each name.
   */
  startChecks(intervalMs: number): void {
    this.checks.start(intervalMs, { now: true });
  }

  async stopChecks(): Promise<void> {
    await this.checks.stop();
  }

  /**
   * Compares the cached totals with the database's; a mismatch that outlasts the notices in flight
   * means a change was never announced, and the cache starts over. Returns whether it was dropped.
   */
  async check(): Promise<boolean> {
    if (!this.complete) {
      // Entries loaded one by one cannot be compared as a whole: read them all afresh, which also
      // makes the next checks comparable. Dropping them instead cost a read per name every
      // interval when only GetNamespace is called: with a thousand names, a tenth of its CPU.
      await this.list();
      return false;
    }
    for (let attempt = 0; attempt < 2; attempt++) {
      const epoch = this.epoch;
      const [records, actual] = await Promise.all([this.list(), registryFingerprint(this.db)]);
      // Notices arriving meanwhile mean writes in flight: the two sides may differ for that reason
      // alone, and the channel is evidently alive. A lost notice shows at the next quiet moment.
      if (epoch !== this.epoch || sameFingerprint(fingerprintOf(records), actual)) return false;
      if (attempt === 0) await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    }
    this.logger.warn({ event: "namespace_cache_resync" }, "namespace cache missed a change; reloading");
    this.clear();
    return true;
  }

  private invalidate(name: string, tell = true): void {
    this.epoch++;
    // Deleted names would stay here for good: past a bound, reads in flight keep nothing instead.
    if (this.invalidatedAt.size >= 2 * this.byName.size + INVALIDATIONS_KEPT) this.forgetInvalidations();
    this.invalidatedAt.set(name, this.epoch);
    this.loading.delete(name);
    this.drop(name);
    if (this.complete) this.stale.add(name);
    if (tell) for (const listener of this.changeListeners) listener(name);
  }

  /**
   * After a committed change: this replica drops the entry and tells its listeners at once, every
   * other replica before this resolves.
   */
  async announce(name: string): Promise<void> {
    this.invalidate(name);
    await this.notifications.publish(NAMESPACES_CHANNEL, name);
  }

  /**
   * Calls `listener` with the name of every namespace said to have changed, or undefined when any may
   * have (the cache starts over); returns the function that stops it.
   */
  onChange(listener: (name: string | undefined) => void): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  clear(): void {
    this.epoch++;
    this.forgetInvalidations();
    this.loading.clear();
    this.loadingAll = undefined;
    this.refreshes.clear();
    this.byName.clear();
    this.byToken.clear();
    this.stale.clear();
    this.sorted = undefined;
    this.complete = false;
    for (const listener of this.changeListeners) listener(undefined);
  }

  async get(name: string): Promise<NamespaceView | undefined> {
    const hit = this.byName.get(name);
    if (hit) return hit;
    if (this.complete) return this.stale.has(name) ? (await this.refreshStale([name])).get(name) : undefined;
    const pending = this.loading.get(name);
    if (pending) return pending;
    const epoch = this.epoch;
    const load = loadNamespaces(this.db, [name])
      .then(([record]) => {
        if (this.keeps(name, epoch)) {
          if (record) this.store(record);
          this.stale.delete(name);
        }
        return record;
      })
      .finally(() => {
        if (this.loading.get(name) === load) this.loading.delete(name);
      });
    this.loading.set(name, load);
    return load;
  }

  /**
   * The rows of `needed` (stale names), read again: each from a re-read in flight that covers it and
   * may keep it (see keeps), the rest by a new one of every stale name no re-read in flight covers.
   * After a burst of writes (a batch create of a thousand names) the next reads cost one query, not
   * one each; a name changed again while a re-read was under way is read again alone, not with the
   * whole backlog. A caller never shares a read begun before a change to the name it needs (a Get
   * after an Update on this replica would answer the old row).
   */
  private async refreshStale(needed: Iterable<string>): Promise<Map<string, NamespaceView>> {
    const from = new Map<string, Refresh>();
    const uncovered: string[] = [];
    for (const name of needed) {
      const refresh = this.coverOf(name);
      if (refresh) from.set(name, refresh);
      else uncovered.push(name);
    }
    if (uncovered.length > 0) {
      const refresh = this.startRefresh();
      for (const name of uncovered) from.set(name, refresh);
    }
    // Awaited together: a failed read is seen by every caller that needed it, none left unhandled.
    const refreshes = [...new Set(from.values())];
    const results = await Promise.all(refreshes.map((refresh) => refresh.done));
    const found = new Map<string, NamespaceView>();
    for (const [name, refresh] of from) {
      const record = results[refreshes.indexOf(refresh)]!.get(name);
      if (record) found.set(name, record);
    }
    return found;
  }

  /** The re-read in flight that covers `name` and may keep what it finds for it. */
  private coverOf(name: string): Refresh | undefined {
    for (const refresh of this.refreshes) if (refresh.names.has(name) && this.keeps(name, refresh.epoch)) return refresh;
    return undefined;
  }

  private startRefresh(): Refresh {
    const names = [...this.stale].filter((name) => !this.coverOf(name));
    const epoch = this.epoch;
    const refresh: Refresh = {
      names: new Set(names),
      epoch,
      done: loadNamespaces(this.db, names)
        .then((records) => {
          for (const record of records) if (this.keeps(record.name, epoch)) this.store(record);
          for (const name of names) if (this.keeps(name, epoch)) this.stale.delete(name);
          return new Map(records.map((record) => [record.name, record]));
        })
        .finally(() => this.refreshes.delete(refresh)),
    };
    this.refreshes.add(refresh);
    return refresh;
  }

  /**
   * Whether what a read begun at `epoch` found for `name` may be kept: the name has not been said to
   * change since. Judged per name, so that under a steady stream of writes to some namespaces the
   * others are still cached, and the stale ones do not pile up.
   */
  private keeps(name: string, epoch: number): boolean {
    return epoch >= this.floor && (this.invalidatedAt.get(name) ?? 0) <= epoch;
  }

  private forgetInvalidations(): void {
    this.invalidatedAt.clear();
    this.floor = this.epoch;
  }

  /** The namespace whose token this is. */
  async findByToken(token: string): Promise<NamespaceView | undefined> {
    // Only a complete cache without stale entries can answer "no such token".
    if (this.complete && this.stale.size === 0) return this.byToken.get(token);
    // A namespace changing all the time (registrations into it) may never settle in the cache: the
    // list read for it then has it.
    const all = await this.list();
    return this.byToken.get(token) ?? all.find((record) => record.token === token);
  }

  /** All namespaces, newest modification first (ties by name). */
  async list(): Promise<NamespaceView[]> {
    for (let attempt = 0; attempt < 4; attempt++) {
      if (this.complete && this.stale.size === 0) return (this.sorted ??= sortByMtime([...this.byName.values()]));
      if (this.complete) {
        await this.refreshStale(this.stale);
        continue;
      }
      // Callers that find the cache incomplete at once (a replica starting) share one read of the whole.
      const load = (this.loadingAll ??= { epoch: this.epoch, done: loadNamespaces(this.db) });
      const records = await load.done.finally(() => {
        if (this.loadingAll === load) this.loadingAll = undefined;
      });
      const { epoch } = load;
      if (epoch < this.floor || this.complete) continue;
      this.byName.clear();
      this.byToken.clear();
      this.complete = true;
      for (const record of records) if (this.keeps(record.name, epoch)) this.store(record);
      // Names said to change while the whole was read (created ones among them) are read again.
      this.stale.clear();
      for (const [name, at] of this.invalidatedAt) if (at > epoch) this.stale.add(name);
    }
    // Writes keep landing while we read: serve a consistent read without caching it.
    return sortByMtime(await loadNamespaces(this.db));
  }

  private store(record: NamespaceView): void {
    this.drop(record.name);
    this.byName.set(record.name, record);
    this.byToken.set(record.token, record);
    this.sorted = undefined;
  }

  private drop(name: string): void {
    const old = this.byName.get(name);
    if (!old) return;
    this.byName.delete(name);
    if (this.byToken.get(old.token) === old) this.byToken.delete(old.token);
    this.sorted = undefined;
  }
}

function sortByMtime(records: NamespaceView[]): NamespaceView[] {
  return records.sort(
    (a, b) => b.updated_at.getTime() - a.updated_at.getTime() || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
}

function fingerprintOf(records: NamespaceView[]): RegistryFingerprint {
  const sum = (pick: (r: NamespaceView) => number) => records.reduce((total, r) => total + pick(r), 0);
  return {
    namespaces: records.length,
    newestUpdate: Math.max(0, ...records.map((r) => r.updated_at.getTime())),
    services: sum((r) => r.service_count),
    instances: sum((r) => r.instance_count),
    healthyInstances: sum((r) => r.healthy_instance_count),
  };
}

function sameFingerprint(a: RegistryFingerprint, b: RegistryFingerprint): boolean {
  return (
    a.namespaces === b.namespaces &&
    a.newestUpdate === b.newestUpdate &&
    a.services === b.services &&
    a.instances === b.instances &&
    a.healthyInstances === b.healthyInstances
  );
}
