import type { NamespaceCache } from "../namespaces/cache.js";
import type { Platform } from "../platform/module.js";
import type { Capability } from "../transport/module.js";
import { ExpirySweeper } from "./expiry.js";
import { registryService } from "./handlers.js";
import { HeartbeatBatcher } from "./heartbeats.js";
import { RegistryService } from "./service.js";

/** Services and instances; start() begins sweeping instances whose heartbeats stopped. */
export function registryModule(platform: Platform, namespaces: NamespaceCache): Capability {
  const { config, db, notifications, logger } = platform;
  const heartbeats = new HeartbeatBatcher(db, notifications, logger);
  const service = new RegistryService({ db, notifications, namespaces, heartbeats });
  const sweeper = new ExpirySweeper({ db, notifications, logger, intervalMs: config.expirySweepMs });
  return {
    services: [registryService(service)],
    start: () => sweeper.start(),
    stop: () => sweeper.stop(),
  };
}
