import type { NamespaceCache } from "../namespaces/cache.js";
import { REGISTRY_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import type { Metrics } from "../platform/metrics.js";
import { Periodic } from "../platform/periodic.js";
import { changesSince, pruneChanges, revisionState, type ChangeView } from "./repository.js";

/** Changes read per query while catching up. */
const PAGE = 2_000;
/** Changes older than this are dropped even when fewer than `kept` exist. */
const MAX_AGE_SECONDS = 3_600;

/** One watcher's interest: changes to one service (or a whole namespace), and to the namespaces its access hangs on. */
export interface FeedSubscriber {
  namespace: string;
  /** Undefined: every service of the namespace. */
  service?: string;
  /** Namespaces whose record decides whether the watcher may go on (the watched one, its token's). */
  guards: readonly string[];
  onChange(change: ChangeView): void;
  /** A guarded namespace changed (deleted, token rotated, exports changed): check access again. */
  onNamespaceChanged(name: string): void;
}

export interface ChangeFeedOptions {
  db: Db;
  notifications: Notifications;
  /** Tells of namespace changes that may take a watcher's access away, including a start-over. */
  namespaces: NamespaceCache;
  logger: Logger;
  metrics: Metrics;
  /** How often to read changes that no notice announced (a writer that died before its notice), and prune. */
  checkMs: number;
  /** How many changes to keep for watchers resuming from a revision. */
  kept: number;
}

/**
 * This replica's view of registry changes, in revision order. A writer announces its revision on
 * REGISTRY_CHANNEL after commit; every replica then reads the changes it has not seen, once, and
 * hands each to the watchers of its service, so a thousand watchers cost one query. A periodic read
 * catches changes whose notice was lost, and prunes what is too old to resume from.
 */
export class ChangeFeed {
  private readonly subscribers = new Map<string, Set<FeedSubscriber>>();
  private readonly guarded = new Map<string, Set<FeedSubscriber>>();
  private readonly listeners = new Set<(change: ChangeView) => void>();
  /** The revision of the last change seen, by service and by namespace; older ones are before `startedAt`. */
  private readonly last = new Map<string, number>();
  private startedAt = 0;
  private count = 0;
  private cursor = 0;
  private pulling: Promise<void> | undefined;
  private pullAgain = false;
  private readonly periodic: Periodic;
  private readonly db: Db;
  private readonly notifications: Notifications;
  private readonly logger: Logger;
  private readonly checkMs: number;
  private readonly kept: number;

  constructor({ db, notifications, namespaces, logger, metrics, checkMs, kept }: ChangeFeedOptions) {
    this.db = db;
    this.notifications = notifications;
    this.logger = logger;
    this.checkMs = checkMs;
    this.kept = kept;
    notifications.on(REGISTRY_CHANNEL, (revision) => {
      if (Number(revision) > this.cursor) this.pull();
    });
    // Through the namespace cache rather than its channel: a lost notice makes the cache start over,
    // and then every guarded namespace may have changed.
    namespaces.onChange((changed) => {
      for (const name of changed === undefined ? [...this.guarded.keys()] : [changed]) {
        for (const subscriber of this.guarded.get(name) ?? []) subscriber.onNamespaceChanged(name);
      }
    });
    notifications.onReconnect(() => this.pull());
    this.periodic = new Periodic(
      async () => {
        this.pull();
        await pruneChanges(this.db, this.kept, MAX_AGE_SECONDS);
      },
      logger,
      "registry_feed_check_failed",
    );
    metrics.collected("atrium_registry_watchers", "Open WatchInstances streams and blocking list queries on this replica.", "gauge", [], () => [
      { labels: {}, value: this.count },
    ]);
  }

  async start(): Promise<void> {
    this.cursor = (await revisionState(this.db)).revision;
    this.startedAt = this.cursor;
    this.periodic.start(this.checkMs);
  }

  async stop(): Promise<void> {
    await this.periodic.stop();
    await this.pulling;
  }

  /** After a commit that took `revision`: this replica reads it at once, the others on the notice. */
  announce(revision: number | undefined): void {
    if (revision === undefined) return;
    this.pull();
    this.notifications.signal(REGISTRY_CHANNEL, String(revision));
  }

  /** Calls `listener` with every change, before the watchers of its service get it. */
  onChange(listener: (change: ChangeView) => void): void {
    this.listeners.add(listener);
  }

  /**
   * The revision of the last change to the service (or, without one, to any service of the
   * namespace) that this replica has seen; the revision it started at when none since.
   */
  revisionOf(namespace: string, service?: string): number {
    return this.last.get(keyOf(namespace, service)) ?? this.startedAt;
  }

  /**
   * Resolves once a change to the service (or namespace) lifts its revision past `index`, or after
   * `ms`, or when `signal` aborts, whichever comes first. An index this replica has not reached
   * (one from a replica ahead of it) resolves at once.
   */
  async waitPast(namespace: string, service: string | undefined, index: number, ms: number, signal: AbortSignal): Promise<void> {
    if (this.revisionOf(namespace, service) > index || index > this.cursor || signal.aborted) return;
    await new Promise<void>((resolve) => {
      let finished = false;
      const done = () => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        unsubscribe();
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      const unsubscribe = this.subscribe({ namespace, service, guards: [], onChange: done, onNamespaceChanged: () => undefined });
    });
  }

  /** Returns the function that ends the subscription. */
  subscribe(subscriber: FeedSubscriber): () => void {
    addTo(this.subscribers, keyOf(subscriber.namespace, subscriber.service), subscriber);
    for (const name of subscriber.guards) addTo(this.guarded, name, subscriber);
    this.count++;
    return () => {
      this.count--;
      removeFrom(this.subscribers, keyOf(subscriber.namespace, subscriber.service), subscriber);
      for (const name of subscriber.guards) removeFrom(this.guarded, name, subscriber);
    };
  }

  /** Reads and hands out new changes; calls during a read make it read once more when done. */
  private pull(): void {
    if (this.pulling) {
      this.pullAgain = true;
      return;
    }
    this.pulling = (async () => {
      do {
        this.pullAgain = false;
        for (;;) {
          const changes = await changesSince(this.db, this.cursor, PAGE);
          for (const change of changes) {
            this.cursor = change.revision;
            for (const listener of this.listeners) listener(change);
            for (const key of [keyOf(change.namespace, change.service), keyOf(change.namespace)]) {
              this.last.set(key, change.revision);
              for (const subscriber of this.subscribers.get(key) ?? []) subscriber.onChange(change);
            }
          }
          if (changes.length < PAGE) break;
        }
      } while (this.pullAgain);
    })()
      .catch((error: unknown) => this.logger.warn({ event: "registry_feed_read_failed", err: error }, "could not read registry changes"))
      .finally(() => (this.pulling = undefined));
  }
}

function keyOf(namespace: string, service?: string): string {
  return service === undefined ? namespace : `${namespace}\u0000${service}`;
}

function addTo<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(value);
}

function removeFrom<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  const set = map.get(key);
  if (!set) return;
  set.delete(value);
  if (set.size === 0) map.delete(key);
}
