import type { Platform } from "../platform/module.js";
import type { Capability } from "../transport/module.js";
import { NamespaceCache } from "./cache.js";
import { namespaceService } from "./handlers.js";
import { NamespaceService } from "./service.js";

export interface NamespacesModule extends Capability {
  service: NamespaceService;
  cache: NamespaceCache;
}

/** Namespaces over an in-memory cache; start() begins the cache's periodic comparison with the database. */
export function namespacesModule({ config, db, notifications, logger, metrics }: Platform): NamespacesModule {
  const cache = new NamespaceCache(db, notifications, logger);
  const service = new NamespaceService(db, cache, config.namespaceHistoryLimit);
  metrics.collected("atrium_namespace_watchers", "Open WatchNamespaces streams on this replica.", "gauge", [], () => [
    { labels: {}, value: service.watchers },
  ]);
  return {
    service,
    cache,
    services: [namespaceService(service)],
    start: () => cache.startChecks(config.cacheCheckMs),
    stop: () => cache.stopChecks(),
  };
}
