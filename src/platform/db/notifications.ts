import { randomUUID } from "node:crypto";
import pg from "pg";
import type { Logger } from "../logger.js";
import { ACK_CHANNEL } from "./channels.js";
import { preparedMark, prepareMarkedStatements } from "./database.js";
import { TickBatcher } from "../tick-batcher.js";

/** Called with a notice's payload, and whether this replica published it (its own echo). */
type Listener = (payload: string, own: boolean) => void;

interface AckWaiter {
  /** Listening connections (replicas) counted when the notice was sent. */
  expected: number;
  received: number;
  finish(): void;
}

/** A notice to send, or (channel ACK_CHANNEL) the id of a notice to acknowledge. */
interface Outgoing {
  channel: string;
  payload: string;
  /** Set for a published notice. */
  waiter?: AckWaiter;
}

const ACK_TIMEOUT_MS = 1_000;
/** The application_name of a listening connection, set once it listens on every channel. */
const LISTENER_NAME = "atrium-listen";
/** A notice on the wire: `<uuid>:<payload>`. */
const NOTICE = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):(.*)$/s;
/** Acknowledgement ids per payload: 200 ids of 37 characters stay under PostgreSQL's 8000 bytes. */
const IDS_PER_ACK = 200;
const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 10_000;

/**
 * Cross-replica change notices over PostgreSQL LISTEN/NOTIFY on one dedicated connection.
 *
 * A writer commits its change, then publishes a notice; every replica (this one included) runs its
 * listeners and acknowledges the notice, and `publish` resolves once all replicas listening at the
 * time have done so, so the caller hears back only when no replica still serves the old value.
 * Waiting for this replica's own echo is not enough: the others' connections deliver the same
 * notice a few milliseconds apart, sometimes after the caller's next request has reached them.
 *
 * Notices are not sent inside the writer's transaction: PostgreSQL holds a global lock from a
 * notifying transaction's commit until its WAL is flushed, which would serialise every write
 * behind one disk flush. Published notices and acknowledgements go out batched, once per tick, on
 * this connection with synchronous_commit off. A replica that dies between its commit and its
 * publish leaves others stale until their periodic check (see the caches) notices the change.
 * After a lost connection every `onReconnect` callback runs, because notices sent meanwhile are gone.
 */
export class Notifications {
  private client: pg.Client | undefined;
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly reconnectListeners = new Set<() => void>();
  private readonly ackWaiters = new Map<string, AckWaiter>();
  /** Notices and acknowledgements of one tick go out in one statement, one statement at a time. */
  private readonly outbox = new TickBatcher<Outgoing>({
    write: (batch) => this.sendAll(batch),
    ready: () => this.client !== undefined,
  });
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
   * Sends a notice to every replica after the change it announces has committed. Resolves when all
   * replicas have acknowledged it, or after a second (a replica that died meanwhile, or no
   * connection). It never rejects.
   */
  publish(channel: string, payload: string): Promise<void> {
    const id = randomUUID();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => waiter.finish(), ACK_TIMEOUT_MS);
      timer.unref();
      const waiter: AckWaiter = {
        expected: Number.POSITIVE_INFINITY,
        received: 0,
        finish: () => {
          clearTimeout(timer);
          this.ackWaiters.delete(id);
          resolve();
        },
      };
      this.ackWaiters.set(id, waiter);
      void this.outbox.add({ channel, payload: `${id}:${payload}`, waiter });
    });
  }

  /** A wake-up call for other replicas: sent with the next batch, not acknowledged, not awaited. */
  signal(channel: string, payload: string): void {
    void this.outbox.add({ channel, payload });
  }

  /** Publishes several notices on one channel; resolves when all are acknowledged. */
  async publishAll(channel: string, payloads: Iterable<string>): Promise<void> {
    await Promise.all([...new Set(payloads)].map((payload) => this.publish(channel, payload)));
  }

  async stop(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    await this.outbox.idle();
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  /** Sends the batch in one statement; a failure is logged, never thrown (the waiters time out). */
  private async sendAll(batch: Outgoing[]): Promise<[]> {
    const messages = joinAcknowledgements(batch);
    try {
      // Prepared once per connection: this runs after every write that others must hear of.
      const { rows } = await this.client!.query<{ replicas: number }>(
        `${preparedMark("notify_batch")}
         with sent as (select pg_notify(c, p) from unnest($1::text[], $2::text[]) as t(c, p))
         select (select count(*) from sent) as sent,
                (select count(*)::int from pg_stat_activity
                  where datname = current_database() and application_name = $3) as replicas`,
        [messages.map((m) => m.channel), messages.map((m) => m.payload), LISTENER_NAME],
      );
      const replicas = rows[0]?.replicas ?? 0;
      for (const { waiter } of messages) {
        if (!waiter) continue;
        waiter.expected = replicas;
        if (waiter.received >= waiter.expected) waiter.finish();
      }
    } catch (error) {
      // The waiters time out; caches elsewhere catch up through their periodic check.
      this.logger.warn({ event: "notify_failed", count: messages.length, err: error }, "could not send notices");
    }
    return [];
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, application_name: `${LISTENER_NAME}-starting` });
    prepareMarkedStatements(client);
    client.on("notification", (message) => this.deliver(message.channel, message.payload ?? ""));
    client.on("error", (error) => {
      this.logger.warn({ event: "notifications_error", err: error }, "notification connection error");
    });
    client.on("end", () => {
      if (this.client === client) this.client = undefined;
      if (!this.closed) this.scheduleReconnect();
    });
    await client.connect();
    // Notices and acknowledgements need no durability; flushing each to disk would serialise them.
    await client.query("SET synchronous_commit TO off");
    for (const channel of [ACK_CHANNEL, ...this.listeners.keys()]) {
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    }
    // Writers count this connection (and wait for its acknowledgements) only from now on.
    await client.query(`SET application_name TO ${pg.escapeLiteral(LISTENER_NAME)}`);
    this.client = client;
    this.outbox.flush();
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

  private deliver(channel: string, message: string): void {
    if (channel === ACK_CHANNEL) {
      for (const id of message.split(",")) {
        const waiter = this.ackWaiters.get(id);
        if (waiter && ++waiter.received >= waiter.expected) waiter.finish();
      }
      return;
    }
    const notice = NOTICE.exec(message);
    const payload = notice ? notice[2]! : message;
    // A published notice's id waits here until its echo comes back (or its publish times out).
    const own = notice !== null && this.ackWaiters.has(notice[1]!);
    for (const listener of this.listeners.get(channel) ?? []) {
      try {
        listener(payload, own);
      } catch (error) {
        this.logger.error({ event: "notification_listener_failed", channel, err: error }, "listener failed");
      }
    }
    if (notice) this.acknowledge(notice[1]!);
  }

  /** Joins the id to the acknowledgement being gathered this tick. */
  private acknowledge(id: string): void {
    void this.outbox.add({ channel: ACK_CHANNEL, payload: id });
  }
}

/** Joins the acknowledgements that follow one another into payloads of up to IDS_PER_ACK ids. */
function joinAcknowledgements(batch: Outgoing[]): Outgoing[] {
  const messages: Outgoing[] = [];
  let idsInLast = 0;
  for (const message of batch) {
    const last = messages.at(-1);
    if (message.channel === ACK_CHANNEL && last?.channel === ACK_CHANNEL && idsInLast < IDS_PER_ACK) {
      last.payload += `,${message.payload}`;
      idsInLast++;
    } else {
      messages.push({ ...message });
      idsInLast = 1;
    }
  }
  return messages;
}
