import {
  InstanceChangeKind,
  RegistryServiceService,
  type Instance,
  type ListInstancesResponse,
  type WatchInstancesResponse,
} from "../../gen/v1/registry_service.js";
import { ITEM_OK, itemStatus } from "../platform/batch.js";
import type { InstanceChangeKind as ChangeKind } from "../platform/db/schema.js";
import { defineService, reusedResponse } from "../transport/call.js";
import type { WatchEvent } from "./instance-watch.js";
import type { InstanceView } from "./repository.js";
import type { RegistryService } from "./service.js";

/** The index a blocking query passes back, as Consul's X-Consul-Index. */
const INDEX_HEADER = "x-atrium-index";

export function registryService(registry: RegistryService) {
  return defineService(
    RegistryServiceService,
    "namespaces",
    {
      registerInstance: async (request, ctx) => ({
        instance: toInstance(request.namespace, await registry.register(ctx.principal, request)),
      }),

      deregisterInstance: async (request, ctx) => {
        await registry.deregister(ctx.principal, request);
        return {};
      },

      heartbeat: async (request, ctx) => ({ expireTime: await registry.heartbeat(ctx.principal, request) }),

      batchHeartbeat: async (request, ctx) => ({
        results: (await registry.batchHeartbeat(ctx.principal, request.heartbeats)).map((result, i) => ({
          instanceId: request.heartbeats[i]!.instanceId,
          expireTime: result.ok ? result.value : undefined,
          status: result.ok ? ITEM_OK : itemStatus(result.error),
        })),
      }),

      updateInstance: async (request, ctx) => ({
        instance: toInstance(request.namespace, await registry.update(ctx.principal, request)),
      }),

      listServices: async (request, ctx) => {
        const { amount, rows, index } = await registry.listServices(ctx.principal, request, ctx);
        ctx.setResponseHeader(INDEX_HEADER, String(index));
        return {
          amount,
          services: rows.map((s) => ({
            namespace: request.namespace,
            name: s.name,
            instanceCount: s.instance_count,
            healthyInstanceCount: s.healthy_instance_count,
            createTime: s.created_at,
          })),
        };
      },

      listInstances: async (request, ctx) => {
        const { rows, index } = await registry.listInstances(ctx.principal, request, ctx);
        ctx.setResponseHeader(INDEX_HEADER, String(index));
        // The rows come from the instance cache, which replaces rather than changes them (one array per service).
        return reusedResponse(rows, undefined, (): ListInstancesResponse => ({ instances: rows.map((i) => toInstance(request.namespace, i)) }));
      },

      deleteService: async (request, ctx) => {
        await registry.deleteService(ctx.principal, request);
        return {};
      },

      watchInstances: (request, ctx, send) =>
        registry.watch(ctx.principal, request, ctx.signal, (event) => send(watchResponse(request.namespace, event))),
    },
    { acceptsNamespaceTokens: true },
  );
}

function toInstance(namespace: string, row: InstanceView): Instance {
  return {
    id: row.id,
    namespace,
    service: row.service_name,
    host: row.host,
    port: row.port,
    weight: row.weight,
    metadata: row.metadata,
    ttlSeconds: row.ttl_seconds,
    healthy: row.healthy,
    isolate: row.isolate,
    lastHeartbeatTime: row.last_heartbeat_at,
    createTime: row.created_at,
  };
}

const CHANGE_KINDS: Record<ChangeKind, InstanceChangeKind> = {
  registered: InstanceChangeKind.INSTANCE_CHANGE_KIND_REGISTERED,
  deregistered: InstanceChangeKind.INSTANCE_CHANGE_KIND_DEREGISTERED,
  expired: InstanceChangeKind.INSTANCE_CHANGE_KIND_EXPIRED,
  revived: InstanceChangeKind.INSTANCE_CHANGE_KIND_REVIVED,
  updated: InstanceChangeKind.INSTANCE_CHANGE_KIND_UPDATED,
  isolation_changed: InstanceChangeKind.INSTANCE_CHANGE_KIND_ISOLATION_CHANGED,
};

/** A change goes to every watcher of its service as one response, encoded once for all of them. */
function watchResponse(namespace: string, event: WatchEvent): WatchInstancesResponse {
  if (!event.change) return toWatchResponse(namespace, event);
  return reusedResponse(event.change, namespace, () => toWatchResponse(namespace, event));
}

function toWatchResponse(namespace: string, event: WatchEvent): WatchInstancesResponse {
  return {
    revision: event.revision,
    snapshot: event.snapshot !== undefined,
    instances: (event.snapshot ?? []).map((i) => toInstance(namespace, i)),
    change: event.change && { kind: CHANGE_KINDS[event.change.kind], instance: toInstance(namespace, event.change.instance) },
  };
}
