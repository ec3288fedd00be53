import { randomUUID } from "node:crypto";
import { sql, type Transaction } from "kysely";
import pg from "pg";
import type { Logger } from "../logger.js";
import type { Database } from "./schema.js";

type Listener = (payload: string) => void;

interface AckWaiter {
  /** Listening connections (replicas) counted when the notice was sent. */
  expected: number;
  received: number;
  finish(): void;
}

const ACK_TIMEOUT_MS = 1_000;
/** Every replica acknowledges each notice it has delivered here, with the notice's id as payload. */
const ACK_CHANNEL = "atrium_ack";
/** The application_name of a listening connection, set once it listens on every channel. */
const LISTENER_NAME = "atrium-listen";
/** A notice on the wire: `<uuid>:<payload>`. */
const NOTICE = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):(.*)$/s;
const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 10_000;

/**
 * Cross-replica change notices over PostgreSQL LISTEN/NOTIFY on one dedicated connection. A notice
 * sent inside a transaction is delivered to every replica (this one included) when it commits.
 * Caches subscribe to drop entries; after a lost connection every `onReconnect` callback runs,
 * because notices sent while disconnected are gone. Each replica acknowledges every notice once its
 * listeners have run, so that a writer can wait until no replica still serves the old value.
 */
export class Notifications {
  private client: pg.Client | undefined;
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly reconnectListeners = new Set<() => void>();
  private readonly ackWaiters = new Map<string, AckWaiter>();
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
   * Queues a notice in `tx`, delivered on commit. The returned promise settles once every replica
   * listening when the notice was sent (this one included) has run its listeners and acknowledged
   * it, or after a second (a replica that died meanwhile); awaiting it after the commit makes the
   * change visible on every replica before the caller hears back. Waiting for this replica's own
   * echo alone is not enough: the others' connections deliver the same notice a few milliseconds
   * apart, sometimes after the caller's next request has reached them. It never rejects.
   */
  async notify(tx: Transaction<Database>, channel: string, payload: string): Promise<{ echoed: Promise<void> }> {
    const id = randomUUID();
    let waiter!: AckWaiter;
    const echoed = new Promise<void>((resolve) => {
      const timer = setTimeout(() => waiter.finish(), ACK_TIMEOUT_MS);
      timer.unref();
      waiter = {
        expected: Number.POSITIVE_INFINITY,
        received: 0,
        finish: () => {
          clearTimeout(timer);
          this.ackWaiters.delete(id);
          resolve();
        },
      };
      this.ackWaiters.set(id, waiter);
    });
    const { rows } = await sql<{ replicas: number }>`
      select pg_notify(${channel}, ${`${id}:${payload}`}),
        (select count(*)::int from pg_stat_activity
          where datname = current_database() and application_name = ${LISTENER_NAME}) as replicas`.execute(tx);
    waiter.expected = rows[0]?.replicas ?? 0;
    if (waiter.received >= waiter.expected) waiter.finish();
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
    const client = new pg.Client({ connectionString: this.url, application_name: `${LISTENER_NAME}-starting` });
    client.on("notification", (message) => this.deliver(client, message.channel, message.payload ?? ""));
    client.on("error", (error) => {
      this.logger.warn({ event: "notifications_error", err: error }, "notification connection error");
    });
    client.on("end", () => {
      if (this.client === client) this.client = undefined;
      if (!this.closed) this.scheduleReconnect();
    });
    await client.connect();
    for (const channel of [ACK_CHANNEL, ...this.listeners.keys()]) {
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    }
    // Writers count this connection (and wait for its acknowledgements) only from now on.
    await client.query(`SET application_name TO ${pg.escapeLiteral(LISTENER_NAME)}`);
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

  private deliver(client: pg.Client, channel: string, message: string): void {
    if (channel === ACK_CHANNEL) {
      const waiter = this.ackWaiters.get(message);
      if (waiter && ++waiter.received >= waiter.expected) waiter.finish();
      return;
    }
    const notice = NOTICE.exec(message);
    const payload = notice ? notice[2]! : message;
    for (const listener of this.listeners.get(channel) ?? []) {
      try {
        listener(payload);
      } catch (error) {
        this.logger.error({ event: "notification_listener_failed", channel, err: error }, "listener failed");
      }
    }
    if (notice) {
      client.query("select pg_notify($1, $2)", [ACK_CHANNEL, notice[1]]).catch((error: unknown) => {
        this.logger.warn({ event: "notification_ack_failed", channel, err: error }, "could not acknowledge a notice");
      });
    }
  }
}
