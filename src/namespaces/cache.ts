import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import { loadNamespaces, type NamespaceRecord } from "./repository.js";

export const NAMESPACES_CHANNEL = "namespaces";

/**
 * Every namespace in memory, so Get and List never touch the database on the hot path. Writes on
 * any replica send the changed name on NAMESPACES_CHANNEL; the entry is dropped and re-read on next
 * use. `epoch` counts invalidations so that a read racing a write never stores what it read before
 * the write.
 */
export class NamespaceCache {
  private readonly byName = new Map<string, NamespaceRecord>();
  /** Names changed since the full load; re-read before the next List. */
  private readonly stale = new Set<string>();
  private complete = false;
  private epoch = 0;
  private sorted: NamespaceRecord[] | undefined;
  private byToken: Map<string, NamespaceRecord> | undefined;

  constructor(
    private readonly db: Db,
    notifications: Notifications,
  ) {
    notifications.on(NAMESPACES_CHANNEL, (name) => this.invalidate(name));
    notifications.onReconnect(() => this.clear());
  }

  invalidate(name: string): void {
    this.epoch++;
    this.byName.delete(name);
    this.sorted = undefined;
    this.byToken = undefined;
    if (this.complete) this.stale.add(name);
  }

  clear(): void {
    this.epoch++;
    this.byName.clear();
    this.stale.clear();
    this.sorted = undefined;
    this.byToken = undefined;
    this.complete = false;
  }

  async get(name: string): Promise<NamespaceRecord | undefined> {
    const hit = this.byName.get(name);
    if (hit) return hit;
    if (this.complete && !this.stale.has(name)) return undefined;
    const epoch = this.epoch;
    const [record] = await loadNamespaces(this.db, [name]);
    if (epoch === this.epoch) {
      if (record) this.byName.set(name, record);
      this.stale.delete(name);
      this.sorted = undefined;
      this.byToken = undefined;
    }
    return record;
  }

  /** The namespace whose token this is. */
  async findByToken(token: string): Promise<NamespaceRecord | undefined> {
    const records = await this.list();
    this.byToken ??= new Map(records.map((r) => [r.token, r]));
    return this.byToken.get(token);
  }

  /** All namespaces, newest modification first (ties by name). */
  async list(): Promise<NamespaceRecord[]> {
    for (let attempt = 0; attempt < 4; attempt++) {
      if (this.complete && this.stale.size === 0) return (this.sorted ??= sortByMtime([...this.byName.values()]));
      const epoch = this.epoch;
      const names = this.complete ? [...this.stale] : undefined;
      const records = await loadNamespaces(this.db, names);
      if (epoch !== this.epoch) continue;
      if (names === undefined) {
        this.byName.clear();
        this.complete = true;
      }
      for (const name of names ?? []) this.byName.delete(name);
      for (const record of records) this.byName.set(record.name, record);
      this.stale.clear();
      this.sorted = undefined;
      this.byToken = undefined;
    }
    // Writes keep landing while we read: serve a consistent read without caching it.
    return sortByMtime(await loadNamespaces(this.db));
  }
}

function sortByMtime(records: NamespaceRecord[]): NamespaceRecord[] {
  return records.sort(
    (a, b) => b.updatedAt.getTime() - a.updatedAt.getTime() || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
}
