import { sql, type Transaction } from "kysely";
import pg from "pg";
import type { Logger } from "../logger.js";
import type { Database } from "./schema.js";

type Listener = (payload: string) => void;

const ECHO_TIMEOUT_MS = 1_000;
const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 10_000;

/**
 * Cross-replica change notices over PostgreSQL LISTEN/NOTIFY on one dedicated connection. A notice
 * sent inside a transaction is delivered to every replica (this one included) when it commits.
 * Caches subscribe to drop entries; after a lost connection every `onReconnect` callback runs,
 * because notices sent while disconnected are gone.
 */
export class Notifications {
  private client: pg.Client | undefined;
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly reconnectListeners = new Set<() => void>();
  private readonly echoWaiters = new Map<string, Set<() => void>>();
  private closed = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private reconnectDelay = RECONNECT_MIN_MS;

  constructor(
    private readonly url: string,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    await this.connect();
  }

  /** Subscribes to a channel; register before start() (or the channel is joined on the next connect). */
  on(channel: string, listener: Listener): void {
    let set = this.listeners.get(channel);
    if (!set) this.listeners.set(channel, (set = new Set()));
    set.add(listener);
  }

  onReconnect(listener: () => void): void {
    this.reconnectListeners.add(listener);
  }

  /**
   * Queues a notice in `tx`, delivered on commit. The returned promise settles once this replica
   * has received the notice back (other replicas receive it at the same moment) or after a second;
   * awaiting it after the commit makes the change visible on every replica before the caller hears
   * back. It never rejects.
   */
  async notify(tx: Transaction<Database>, channel: string, payload: string): Promise<{ echoed: Promise<void> }> {
    const key = `${channel}\u0000${payload}`;
    const echoed = new Promise<void>((resolve) => {
      let waiters = this.echoWaiters.get(key);
      if (!waiters) this.echoWaiters.set(key, (waiters = new Set()));
      const done = () => {
        clearTimeout(timer);
        waiters.delete(done);
        if (waiters.size === 0 && this.echoWaiters.get(key) === waiters) this.echoWaiters.delete(key);
        resolve();
      };
      const timer = setTimeout(done, ECHO_TIMEOUT_MS);
      timer.unref();
      waiters.add(done);
    });
    await sql`select pg_notify(${channel}, ${payload})`.execute(tx);
    return { echoed };
  }

  async stop(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, application_name: "atrium-listen" });
    client.on("notification", (message) => this.deliver(message.channel, message.payload ?? ""));
    client.on("error", (error) => {
      this.logger.warn({ event: "notifications_error", err: error }, "notification connection error");
    });
    client.on("end", () => {
      if (this.client === client) this.client = undefined;
      if (!this.closed) this.scheduleReconnect();
    });
    await client.connect();
    for (const channel of this.listeners.keys()) {
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    }
    this.client = client;
  }

  private scheduleReconnect(): void {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => {
      this.connect()
        .then(() => {
          this.reconnectDelay = RECONNECT_MIN_MS;
          this.logger.info({ event: "notifications_reconnected" }, "notification connection restored");
          for (const listener of this.reconnectListeners) listener();
        })
        .catch((error: unknown) => {
          this.logger.warn({ event: "notifications_reconnect_failed", err: error }, "notification reconnect failed");
          this.reconnectDelay = Math.min(this.reconnectDelay * 2, RECONNECT_MAX_MS);
          if (!this.closed) this.scheduleReconnect();
        });
    }, this.reconnectDelay);
    this.reconnectTimer.unref();
  }

  private deliver(channel: string, payload: string): void {
    for (const listener of this.listeners.get(channel) ?? []) {
      try {
        listener(payload);
      } catch (error) {
        this.logger.error({ event: "notification_listener_failed", channel, err: error }, "listener failed");
      }
    }
    for (const done of [...(this.echoWaiters.get(`${channel}\u0000${payload}`) ?? [])]) done();
  }
}
