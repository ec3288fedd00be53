import { HEARTBEATS_CHANNEL, NAMESPACES_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { TickBatcher } from "../platform/tick-batcher.js";
import type { ChangeFeed } from "./change-feed.js";
import type { InstanceCache } from "./instance-cache.js";
import { recordChanges, renewInstances, type HeartbeatOutcome, type HeartbeatTarget } from "./repository.js";

const MAX_BATCH = 2_000;
/** Bytes of namespace names per heartbeat notice, under PostgreSQL's 8000-byte payload limit. */
const NOTICE_BYTES = 7_000;

/**
 * Heartbeats arrive by the thousand per second and each only moves a timestamp, so they are written
 * in batches: while one batch is being written the next one gathers, and each caller is answered
 * when its batch has committed. The batch commits without waiting for the disk flush (a heartbeat
 * lost in a crash costs at most one TTL of health); only instances that come back to health take a
 * transaction, which records the change, and notify the namespace cache. Every batch tells the instance caches which
 * namespaces' heartbeat times moved, so lists lag by at most a batch.
 */
export class HeartbeatBatcher {
  private readonly batcher = new TickBatcher<HeartbeatTarget, HeartbeatOutcome | undefined>({
    write: (targets) => this.write(targets),
    maxBatch: MAX_BATCH,
  });

  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly feed: ChangeFeed,
    private readonly instances: InstanceCache,
    private readonly logger: Logger,
  ) {}

  /** Renews the instance; undefined when no such instance is in that namespace and service. */
  renew(target: HeartbeatTarget): Promise<HeartbeatOutcome | undefined> {
    return this.batcher.add(target);
  }

  private async write(targets: HeartbeatTarget[]): Promise<(HeartbeatOutcome | undefined)[]> {
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
      const renewed = [...new Set(outcomes.map((o) => o.namespace))];
      for (const name of renewed) this.instances.invalidate(name);
      for (const names of noticesOf(renewed)) this.notifications.signal(HEARTBEATS_CHANNEL, names);
      await this.notifications.publishAll(
        NAMESPACES_CHANNEL,
        outcomes.filter((o) => o.revived).map((o) => o.namespace),
      );
      // A target naming the right instance under the wrong namespace or service finds nothing.
      const found = new Map(outcomes.map((o) => [placeOf({ instanceId: o.instanceId, namespace: o.namespace, service: o.service }), o]));
      return targets.map((t) => found.get(placeOf(t)));
    } catch (error) {
      this.logger.error({ event: "heartbeat_batch_failed", size: targets.length, err: error }, "heartbeat batch failed");
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
