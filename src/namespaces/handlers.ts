import type { Namespace } from "../../gen/v1/namespace.js";
import {
  NamespaceChangeKind,
  NamespaceServiceService,
  type GetNamespaceResponse,
  type NamespaceHistoryEntry,
} from "../../gen/v1/namespace_service.js";
import type { NamespaceHistoryRow } from "../platform/db/schema.js";
import type { Principal } from "../platform/auth.js";
import { rfc3339 } from "../platform/ids.js";
import { ITEM_OK, itemStatus } from "../platform/batch.js";
import { defineService, reusedResponse } from "../transport/call.js";
import type { NamespaceChange } from "./namespace-watch.js";
import type { NamespaceView } from "./repository.js";
import type { NamespaceService } from "./service.js";

export function namespaceService(namespaces: NamespaceService) {
  const view = (row: NamespaceView, principal: Principal, withToken = false) =>
    toNamespace(row, namespaces.canEdit(principal, row), withToken);

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

    getNamespace: async (request, ctx) => {
      const row = await namespaces.get(request.name);
      const editable = namespaces.canEdit(ctx.principal, row);
      // The row comes from the namespace cache, which replaces rather than changes it; whether the
      // caller may edit is the only part of the answer that depends on the caller.
      return reusedResponse(row, editable, (): GetNamespaceResponse => ({ namespace: toNamespace(row, editable, false) }));
    },

    listNamespaces: async (request, ctx) => {
      const { amount, rows } = await namespaces.list({ names: request.name, owners: request.owner, offset: request.offset, limit: request.limit });
      return { amount, namespaces: rows.map((r) => view(r, ctx.principal)) };
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

    listNamespaceHistory: async (request, ctx) => {
      const { rows, nextPageToken } = await namespaces.listHistory(ctx.principal, request);
      return { entries: rows.map(toHistoryEntry), nextPageToken };
    },

    watchNamespaces: (_request, ctx, send) =>
      namespaces.watch(ctx.signal, (event) =>
        send(
          "snapshot" in event
            ? { snapshot: true, namespaces: event.snapshot.map((r) => view(r, ctx.principal)), kind: NamespaceChangeKind.NAMESPACE_CHANGE_KIND_UNSPECIFIED, namespace: undefined }
            : { snapshot: false, namespaces: [], kind: CHANGE_KINDS[event.change], namespace: view(event.namespace, ctx.principal) },
        ),
      ),
  });
}

const CHANGE_KINDS: Record<NamespaceChange, NamespaceChangeKind> = {
  created: NamespaceChangeKind.NAMESPACE_CHANGE_KIND_CREATED,
  updated: NamespaceChangeKind.NAMESPACE_CHANGE_KIND_UPDATED,
  deleted: NamespaceChangeKind.NAMESPACE_CHANGE_KIND_DELETED,
  counts_changed: NamespaceChangeKind.NAMESPACE_CHANGE_KIND_COUNTS_CHANGED,
};

/**
 * The wire form. Grants (user_ids, group_ids) and their removals are write-only; the token is only
 * returned by create and the token methods.
 */
function toNamespace(row: NamespaceView, editable: boolean, withToken: boolean): Namespace {
  return {
    name: row.name,
    comment: row.comment ?? undefined,
    owners: row.owners,
    token: withToken ? row.token : undefined,
    ctime: rfc3339(row.created_at),
    mtime: rfc3339(row.updated_at),
    totalServiceCount: row.service_count,
    totalHealthInstanceCount: row.healthy_instance_count,
    totalInstanceCount: row.instance_count,
    userIds: [],
    groupIds: [],
    id: row.id,
    removeUserIds: [],
    removeGroupIds: [],
    editable,
    serviceExportTo: row.service_export_to,
    metadata: row.metadata,
    syncToGlobalRegistry: row.sync_to_global_registry,
    deleteable: editable,
  };
}

function toHistoryEntry(row: NamespaceHistoryRow): NamespaceHistoryEntry {
  return {
    action: row.action,
    actor: row.actor,
    accountId: row.account_id,
    time: rfc3339(row.created_at),
    changes: row.changes.map((c) => ({
      field: c.field,
      before: c.before === undefined ? "" : JSON.stringify(c.before),
      after: c.after === undefined ? "" : JSON.stringify(c.after),
    })),
  };
}
