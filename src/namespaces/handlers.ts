import type { Namespace } from "../../gen/v1/namespace.js";
import { NamespaceServiceService } from "../../gen/v1/namespace_service.js";
import type { Principal } from "../platform/auth.js";
import { rfc3339 } from "../platform/ids.js";
import { ITEM_OK, itemStatus } from "../platform/batch.js";
import { pageOf } from "../platform/paging.js";
import { defineService } from "../transport/call.js";
import type { NamespaceRecord } from "./repository.js";
import type { NamespaceService } from "./service.js";

export function namespaceService(namespaces: NamespaceService) {
  const view = (record: NamespaceRecord, principal: Principal, withToken = false) =>
    toNamespace(record, namespaces.canEdit(principal, record), withToken);

  return defineService(NamespaceServiceService, "namespaces", {
    createNamespace: async (request, ctx) => ({
      namespace: view(await namespaces.create(ctx.principal, request.namespace), ctx.principal, true),
    }),

    batchCreateNamespaces: async (request, ctx) => ({
      results: (await namespaces.batchCreate(ctx.principal, request.namespaces)).map((result) =>
        result.ok
          ? { namespace: view(result.value, ctx.principal, true), status: ITEM_OK }
          : { namespace: undefined, status: itemStatus(result.error) },
      ),
    }),

    getNamespace: async (request, ctx) => ({
      namespace: view(await namespaces.get(request.name), ctx.principal),
    }),

    listNamespaces: async (request, ctx) => {
      const { offset, limit } = pageOf(request, { defaultLimit: 100, maxLimit: 100 });
      const { amount, records } = await namespaces.list({ names: request.name, owners: request.owner, offset, limit });
      return { amount, namespaces: records.map((r) => view(r, ctx.principal)) };
    },

    updateNamespace: async (request, ctx) => ({
      namespace: view(
        await namespaces.update(ctx.principal, request.namespace, request.updateMask ?? []),
        ctx.principal,
      ),
    }),

    deleteNamespace: async (request, ctx) => {
      await namespaces.delete(ctx.principal, request.name);
      return {};
    },

    batchDeleteNamespaces: async (request, ctx) => ({
      results: (await namespaces.batchDelete(ctx.principal, request.names)).map((result, i) => ({
        name: request.names[i]!,
        status: result.ok ? ITEM_OK : itemStatus(result.error),
      })),
    }),

    getNamespaceToken: async (request, ctx) => ({
      name: request.name,
      token: await namespaces.getToken(ctx.principal, request.name),
    }),

    updateNamespaceToken: async (request, ctx) => ({
      name: request.name,
      token: await namespaces.rotateToken(ctx.principal, request.name),
    }),
  });
}

/**
 * The wire form. Grants (user_ids, group_ids) and their removals are write-only; the token is only
 * returned by create and the token methods.
 */
function toNamespace(record: NamespaceRecord, editable: boolean, withToken: boolean): Namespace {
  return {
    name: record.name,
    comment: record.comment ?? undefined,
    owners: record.owners,
    token: withToken ? record.token : undefined,
    ctime: rfc3339(record.createdAt),
    mtime: rfc3339(record.updatedAt),
    totalServiceCount: record.serviceCount,
    totalHealthInstanceCount: record.healthyInstanceCount,
    totalInstanceCount: record.instanceCount,
    userIds: [],
    groupIds: [],
    id: record.id,
    removeUserIds: [],
    removeGroupIds: [],
    editable,
    serviceExportTo: record.serviceExportTo,
    metadata: record.metadata,
    syncToGlobalRegistry: record.syncToGlobalRegistry,
    deleteable: editable,
  };
}
