import type { WatchInstancesRequest } from "../../gen/v1/registry_service.js";
import type { Db } from "../platform/db/database.js";
import { cancellation, Code, RpcError } from "../platform/errors.js";
import type { ChangeFeed } from "./change-feed.js";
import { isHealthy } from "./instance-cache.js";
import { changesSince, listInstances, revisionState, type ChangeView, type InstanceChangeView, type InstanceView } from "./repository.js";

/** Changes a watcher may fall behind by before its stream ends (it resumes from its last revision). */
const MAX_QUEUED = 10_000;

/** A message for the watcher: the whole list at a revision, or one change. */
export interface WatchEvent {
  revision: number;
  snapshot?: InstanceView[];
  change?: InstanceChangeView;
}

export interface InstanceWatchOptions {
  db: Db;
  feed: ChangeFeed;
  request: WatchInstancesRequest;
  /** The watched namespace's id, as the access check found it. */
  namespaceId: string;
  signal: AbortSignal;
  /** Namespaces whose changes may take the watcher's access away. */
  guards: readonly string[];
  /** Throws the RpcError that ends the stream when the caller may no longer watch. */
  checkAccess(): Promise<void>;
}

/**
 * One WatchInstances stream. It subscribes to the feed before reading where it starts (a snapshot,
 * or the changes since the caller's revision), so nothing committed in between is lost; changes
 * the start already covers are skipped by revision. With healthy_only, the list and the changes
 * both show only healthy, non-isolated instances.
 */
export class InstanceWatch {
  private queue: ChangeView[] = [];
  /** What ends the stream: an RpcError for the caller, or a fault the Router logs. */
  private failure: unknown;
  private wake: (() => void) | undefined;
  private checks: Promise<void> = Promise.resolve();
  /** With healthy_only: the instances in the watcher's list as it was last told. */
  private readonly visible = new Set<string>();

  constructor(private readonly options: InstanceWatchOptions) {}

  async run(send: (event: WatchEvent) => Promise<void>): Promise<void> {
    const { feed, request, signal, guards } = this.options;
    const unsubscribe = feed.subscribe({
      namespace: request.namespace,
      service: request.service,
      guards,
      onChange: (change) => {
        if (this.queue.length < MAX_QUEUED) this.queue.push(change);
        else this.fail(new RpcError(Code.RESOURCE_EXHAUSTED, "the watcher fell behind; resume from the last revision received"));
        this.notify();
      },
      onNamespaceChanged: () => {
        this.checks = this.checks.then(() => this.options.checkAccess()).catch((error: unknown) => this.fail(error));
      },
    });
    const onAbort = () => this.notify();
    signal.addEventListener("abort", onAbort);
    try {
      let last = await this.start(send);
      for (;;) {
        if (signal.aborted) throw cancellation(signal);
        if (this.failure) throw this.failure;
        const change = this.queue.shift();
        if (!change) {
          await new Promise<void>((resolve) => (this.wake = resolve));
          continue;
        }
        if (change.revision <= last) continue;
        last = change.revision;
        if (isInstanceChange(change) && this.seen(change)) await send({ revision: change.revision, change });
      }
    } finally {
      unsubscribe();
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Whether the watcher is told of a change: always, unless it watches healthy instances only; then
   * only of instances in its list or entering it (registered, revived, released from isolation) or
   * leaving it (deregistered, expired, isolated). Heartbeats and weights of the others are not its business.
   */
  private seen(change: InstanceChangeView): boolean {
    if (!this.options.request.healthyOnly) return true;
    const { id } = change.instance;
    const was = this.visible.has(id);
    const now = change.kind !== "deregistered" && isHealthy(change.instance);
    if (now) this.visible.add(id);
    else this.visible.delete(id);
    return was || now;
  }

  /**
   * Sends the list where the watcher starts, or queues the changes it missed ahead of any the feed
   * brought meanwhile; returns the revision the watcher has seen.
   */
  private async start(send: (event: WatchEvent) => Promise<void>): Promise<number> {
    const { db, request, namespaceId } = this.options;
    const start = await db
      .transaction()
      .setIsolationLevel("repeatable read")
      .execute(async (tx) => {
        const state = await revisionState(tx);
        const after = request.revision;
        // A healthy-only watcher resumes from a fresh list: which instances it held at its revision
        // is not kept, and without it the changes since cannot be told apart as entering or leaving.
        if (after > 0 && !request.healthyOnly && after >= state.pruned_through && after <= state.revision) {
          const of = { namespace: request.namespace, service: request.service };
          return { revision: state.revision, changes: await changesSince(tx, after, state.revision - after, of) };
        }
        // Should the namespace go meanwhile, its instances went with it: the list is empty, and the
        // access check that its deletion triggers ends the stream.
        return { revision: state.revision, snapshot: await listInstances(tx, namespaceId, request.service, request.healthyOnly) };
      });
    if (start.changes) {
      // Not spread into unshift: a resume far behind (REGISTRY_CHANGES_KEPT allows millions) would
      // pass more arguments than the stack holds.
      this.queue = start.changes.concat(this.queue);
      return request.revision;
    }
    for (const instance of start.snapshot) this.visible.add(instance.id);
    await send({ revision: start.revision, snapshot: start.snapshot });
    return start.revision;
  }

  private fail(error: unknown): void {
    this.failure ??= error;
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}

/** A service deleted while it had no instance changes nothing in a watcher's list, which was empty and stays so. */
function isInstanceChange(change: ChangeView): change is InstanceChangeView {
  return change.kind !== "service_deleted";
}
