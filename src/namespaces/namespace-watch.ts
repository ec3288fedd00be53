import { cancellation } from "../platform/errors.js";
import type { NamespaceCache } from "./cache.js";
import type { NamespaceView } from "./repository.js";

export type NamespaceChange = "created" | "updated" | "deleted" | "counts_changed";

/** The whole list first, then one namespace change at a time. */
export type NamespaceEvent = { snapshot: NamespaceView[] } | { change: NamespaceChange; namespace: NamespaceView };

/**
 * One WatchNamespaces stream. It listens to the cache's change notices (from writes on any replica)
 * before reading the list, then reads each named namespace again and tells what changed by
 * comparing it with what it last sent; a notice that changed nothing (this replica's own write
 * heard again) sends nothing.
 */
export async function watchNamespaces(cache: NamespaceCache, signal: AbortSignal, send: (event: NamespaceEvent) => Promise<void>): Promise<void> {
  /** Names to look at again; undefined: all of them. */
  const names: (string | undefined)[] = [];
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const stop = cache.onChange((name) => {
    names.push(name);
    notify();
  });
  signal.addEventListener("abort", notify);
  try {
    const all = await cache.list();
    const known = new Map(all.map((r) => [r.name, r]));
    await send({ snapshot: all });
    for (;;) {
      if (signal.aborted) throw cancellation(signal);
      if (names.length === 0) {
        await new Promise<void>((resolve) => (wake = resolve));
        continue;
      }
      const name = names.shift();
      if (name === undefined) {
        names.push(...new Set([...known.keys(), ...(await cache.list()).map((r) => r.name)]));
        continue;
      }
      const before = known.get(name);
      const after = await cache.get(name);
      if (after) known.set(name, after);
      else known.delete(name);
      const change = changeOf(before, after);
      if (change) await send({ change, namespace: (after ?? before)! });
    }
  } finally {
    stop();
    signal.removeEventListener("abort", notify);
  }
}

function changeOf(before: NamespaceView | undefined, after: NamespaceView | undefined): NamespaceChange | undefined {
  if (!before) return after ? "created" : undefined;
  if (!after) return "deleted";
  if (recordOf(before) !== recordOf(after)) return "updated";
  const counts = (r: NamespaceView) => [r.service_count, r.instance_count, r.healthy_instance_count].join();
  return counts(before) === counts(after) ? undefined : "counts_changed";
}

/** The record without its counts, comparable as a string. */
function recordOf(r: NamespaceView): string {
  return JSON.stringify({ ...r, service_count: 0, instance_count: 0, healthy_instance_count: 0 });
}
