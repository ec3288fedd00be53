import type { NamespaceCache } from "../namespaces/cache.js";
import type { Platform } from "../platform/module.js";
import type { Capability } from "../transport/module.js";
import { ChangeFeed } from "./change-feed.js";
import { ExpirySweeper } from "./expiry.js";
import { registryService } from "./handlers.js";
import { HeartbeatBatcher } from "./heartbeats.js";
import { InstanceCache } from "./instance-cache.js";
import { RegistryService } from "./service.js";

/**
 * Services and instances; start() begins following changes, sweeping instances whose heartbeats
 * stopped and flushing heartbeats answered from memory; stop() writes the heartbeats still waiting.
 */
export function registryModule(platform: Platform, namespaces: NamespaceCache): Capability {
  const { config, db, notifications, logger, metrics } = platform;
  const feed = new ChangeFeed({ db, notifications, namespaces, logger, metrics, checkMs: config.cacheCheckMs, kept: config.registryChangesKept });
  const instances = new InstanceCache(db, notifications, feed, logger);
  const heartbeats = new HeartbeatBatcher(db, notifications, feed, instances, logger);
  const service = new RegistryService({ db, namespaces, heartbeats, feed, instances });
  const sweeper = new ExpirySweeper({ db, notifications, feed, logger, intervalMs: config.expirySweepMs });
  return {
    services: [registryService(service)],
    start: async () => {
      await feed.start();
      instances.startChecks(config.cacheCheckMs);
      sweeper.start();
      heartbeats.start();
    },
    stop: async () => {
      // First: the renewals it writes still announce themselves through the feed.
      await heartbeats.stop();
      await sweeper.stop();
      await instances.stopChecks();
      await feed.stop();
    },
  };
}
