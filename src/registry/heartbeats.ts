import { HEARTBEATS_CHANNEL, NAMESPACES_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { Periodic } from "../platform/periodic.js";
import { TickBatcher } from "../platform/tick-batcher.js";
import type { ChangeFeed } from "./change-feed.js";
import type { InstanceCache } from "./instance-cache.js";
import { recordChanges, renewInstances, type HeartbeatTarget } from "./repository.js";

const MAX_BATCH = 2_000;
/**
 * How long a renewal answered from memory may wait for its statement. Far below the shortest TTL
 * (1 s): the database's expiry time of an instance heartbeating on time must not pass meanwhile,
 * or another replica's sweeper would expire it.
 */
const FLUSH_MS = 200;
/**
 * Heartbeats are answered from memory only while renewals reach the database: none waits longer than
 * this, and the last flush did not fail. Otherwise they wait for their own write, which tells a client
 * of a database that cannot take them rather than promising an expiry no sweeper will see.
 */
const LAG_LIMIT_MS = 2 * FLUSH_MS;
/** Bytes of namespace names per heartbeat notice, under PostgreSQL's 8000-byte payload limit. */
const NOTICE_BYTES = 7_000;

/**
 * Heartbeats arrive by the thousand per second and each only moves a timestamp, so they are written
 * in batches. A heartbeat of an instance this replica's instance cache holds as healthy is answered
 * at once, as its renewal would answer, and the renewal is written with the others every FLUSH_MS
 * (sooner once MAX_BATCH wait), while flushes keep up (see LAG_LIMIT_MS); a failed flush keeps its
 * renewals for the next one, and stop() writes what waits. Any other heartbeat (an unknown, expired or isolated instance, or a namespace
 * not in memory) waits for its batch: while one batch is being written the next one gathers, and
 * each caller is answered when its batch has committed. Batches commit without waiting for the disk
 * flush (a heartbeat lost in a crash costs at most one TTL of health); only instances that come back
 * to health take a transaction, which records the change, and notify the namespace cache. Every
 * batch tells the instance caches which namespaces' heartbeat times moved, so lists lag by at most a
 * flush.
 */
export class HeartbeatBatcher {
  private readonly batcher = new TickBatcher<HeartbeatTarget, Date | undefined>({
    write: (targets) => this.write(targets, false),
    maxBatch: MAX_BATCH,
  });
  /** Renewals already answered, by instance id (the cache vouched for their namespace and service). */
  private readonly pending = new Map<string, HeartbeatTarget>();
  /** When the oldest of `pending` was answered (performance.now()). */
  private pendingSince = 0;
  private flushFailed = false;
  private stopping = false;
  private flushing: Promise<void> | undefined;
  private readonly flushes: Periodic;

  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly feed: ChangeFeed,
    private readonly instances: InstanceCache,
    private readonly logger: Logger,
  ) {
    this.flushes = new Periodic(() => this.flush(), logger, "heartbeat_flush_failed");
  }

  start(): void {
    this.flushes.start(FLUSH_MS);
  }

  /** Writes the renewals still waiting, and lets batches being written finish. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.flushes.stop();
    await this.flushing;
    await this.flush();
    await this.batcher.idle();
    if (this.pending.size > 0) {
      this.logger.error({ event: "heartbeat_renewals_lost", count: this.pending.size }, "heartbeat renewals not written before stopping");
    }
  }

  /** Renews the instance; resolves with its new expiry time, undefined when no such instance is in that namespace and service. */
  renew(target: HeartbeatTarget): Promise<Date | undefined> {
    const known = this.instances.healthyInstance(target.namespace, target.service, target.instanceId);
    if (!known || !this.keepingUp()) return this.batcher.add(target);
    if (this.pending.size === 0) this.pendingSince = performance.now();
    this.pending.set(target.instanceId, target);
    if (this.pending.size >= MAX_BATCH) void this.flush();
    return Promise.resolve(new Date(Date.now() + known.ttl_seconds * 1000));
  }

  private keepingUp(): boolean {
    return !this.stopping && !this.flushFailed && (this.pending.size === 0 || performance.now() - this.pendingSince < LAG_LIMIT_MS);
  }

  /** Writes the renewals answered so far; those of a failed write wait for the next flush. */
  flush(): Promise<void> {
    return (this.flushing ??= this.writePending().finally(() => (this.flushing = undefined)));
  }

  private async writePending(): Promise<void> {
    const targets = [...this.pending.values()];
    this.pending.clear();
    let failed = false;
    for (let i = 0; i < targets.length; i += MAX_BATCH) {
      const batch = targets.slice(i, i + MAX_BATCH);
      try {
        const renewed = await this.write(batch, true);
        // Answered from memory, yet expired, moved or deregistered by another replica whose notice has
        // not arrived: the namespace is read again, and the instance's next heartbeat answers for it.
        for (const name of new Set(batch.filter((_, j) => renewed[j] === undefined).map((t) => t.namespace))) this.instances.invalidate(name);
      } catch {
        // Logged by write; a heartbeat answered meanwhile is as good as the one that failed.
        failed = true;
        for (const target of batch) if (!this.pending.has(target.instanceId)) this.pending.set(target.instanceId, target);
      }
    }
    this.flushFailed = failed;
  }

  /** `deferred`: renewals already answered, kept for the next flush when this fails. */
  private async write(targets: HeartbeatTarget[], deferred: boolean): Promise<(Date | undefined)[]> {
    try {
      // One target per instance id and place: a second heartbeat naming the same id under another
      // service (a misbehaving client) must not replace the right one in the batch.
      const unique = new Map(targets.map((t) => [placeOf(t), t]));
      // Most heartbeats renew a healthy instance, which changes nothing a watcher sees: one
      // statement, committed on its own. Instances it found but left alone (not healthy) take a
      // transaction that records their revival with it; those it did not find need nothing more, so
      // a client sending unknown ids does not slow the batches it shares.
      const { renewed: outcomes, leftAlone } = await renewInstances(this.db, [...unique.values()], { healthyOnly: true });
      let revision: number | undefined;
      if (leftAlone.length > 0) {
        const revived = await this.db.transaction().execute(async (tx) => {
          const ids = new Set(leftAlone);
          const { renewed } = await renewInstances(tx, [...unique.values()].filter((t) => ids.has(t.instanceId)), { healthyOnly: false });
          revision = await recordChanges(tx, renewed.filter((o) => o.revived).map((o) => ({ instanceId: o.instanceId, kind: "revived" as const })));
          return renewed;
        });
        outcomes.push(...revived);
      }
      this.feed.announce(revision);
      const renewed = new Map(outcomes.map((o) => [o.namespace, o.namespaceId]));
      for (const [name, namespaceId] of renewed) {
        this.instances.renewed(name);
        // So that the namespace's next heartbeats can be answered from memory.
        this.instances.warm(name, namespaceId);
      }
      for (const names of noticesOf([...renewed.keys()])) this.notifications.signal(HEARTBEATS_CHANNEL, names);
      await this.notifications.publishAll(
        NAMESPACES_CHANNEL,
        outcomes.filter((o) => o.revived).map((o) => o.namespace),
      );
      // A target naming the right instance under the wrong namespace or service finds nothing.
      const found = new Map(outcomes.map((o) => [placeOf({ instanceId: o.instanceId, namespace: o.namespace, service: o.service }), o]));
      return targets.map((t) => found.get(placeOf(t))?.expiresAt);
    } catch (error) {
      this.logger.error(
        { event: "heartbeat_batch_failed", size: targets.length, deferred, err: error },
        deferred ? "heartbeat batch failed; its renewals wait for the next flush" : "heartbeat batch failed",
      );
      throw error;
    }
  }
}

function placeOf({ instanceId, namespace, service }: HeartbeatTarget): string {
  return `${namespace}\n${service}\n${instanceId}`;
}

/** The names, newline-separated, in as few notices as fit. */
function noticesOf(names: string[]): string[] {
  const notices: string[] = [];
  let current = "";
  for (const name of names) {
    if (current && current.length + name.length + 1 > NOTICE_BYTES) {
      notices.push(current);
      current = "";
    }
    current = current ? `${current}\n${name}` : name;
  }
  if (current) notices.push(current);
  return notices;
}
