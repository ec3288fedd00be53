import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient, type AtriumClient } from "../src/client/index.js";
import { ADMIN_TOKEN } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { Receiver, type Received } from "./support/receiver.js";
import { ServiceProcess } from "./support/service-process.js";
import { until } from "./support/expect.js";

/**
 * Webhook delivery across real processes and real time: a replica killed with deliveries pending
 * or in flight, two replicas sharing one database, and the retry backoff at its real pace.
 */

/** The dispatcher's lease: a delivery held by a dead replica is claimed again after this. */
const LEASE_MS = 30_000;

interface Service {
  process: ServiceProcess;
  grpcAddress: string;
  admin: AtriumClient;
}

const processes: ServiceProcess[] = [];
const clients: AtriumClient[] = [];
const receivers: Receiver[] = [];
const pools: pg.Pool[] = [];

function client(address: string, token: string): AtriumClient {
  const c = createClient({ address, token });
  clients.push(c);
  return c;
}

/** One replica of the service on `databaseUrl`, on free ports, receivers on loopback allowed. */
async function startService(databaseUrl: string, env: Record<string, string> = {}): Promise<Service> {
  const service = new ServiceProcess({
    GRPC_PORT: "0",
    HTTP_PORT: "0",
    HOST: "127.0.0.1",
    DATABASE_URL: databaseUrl,
    ADMIN_TOKEN,
    LOG_LEVEL: "info",
    DATABASE_POOL_SIZE: "5",
    SHUTDOWN_GRACE_MS: "2000",
    WEBHOOK_ALLOW_PRIVATE: "true",
    ...env,
  });
  processes.push(service);
  const started = await service.waitForEvent("started");
  const grpcAddress = `127.0.0.1:${started.grpc_port as number}`;
  return { process: service, grpcAddress, admin: client(grpcAddress, ADMIN_TOKEN) };
}

/** A fresh account with a key that may manage webhooks and publish events. */
async function accountKey(admin: AtriumClient): Promise<string> {
  const { account } = await admin.admin.createAccount({ name: "durability", groupIds: [] });
  const created = await admin.admin.createApiKey({
    accountId: account!.id,
    name: "webhooks and events",
    scopes: ["webhooks", "events:publish"],
  });
  return created.key;
}

async function startReceiver(secret: () => string): Promise<Receiver> {
  const receiver = await Receiver.start(secret);
  receivers.push(receiver);
  return receiver;
}

function sql(databaseUrl: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  pools.push(pool);
  return pool;
}

function webhookId(r: Received): string {
  return r.headers["x-webhook-id"] as string;
}

function seqOf(r: Received): number {
  return r.body.data.seq as number;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await Promise.all(processes.splice(0).map((p) => p.terminate()));
  await Promise.all(receivers.splice(0).map((r) => r.stop()));
  await Promise.all(pools.splice(0).map((p) => p.end()));
});

afterAll(async () => {
  for (const p of processes) if (p.running) p.child.kill("SIGKILL");
});

describe("webhook delivery across processes", () => {
  it(
    "a replica killed with retries pending and attempts in flight loses nothing: a fresh one delivers every delivery",
    { timeout: 150_000 },
    async () => {
      const databaseUrl = await createTestDatabase();
      const db = sql(databaseUrl);
      // Backoff unit 1 s on the replica that dies: every delivery is tried once (or twice) before
      // the kill and none runs out of retries (the third attempt would come 3 s after the first).
      const first = await startService(databaseUrl, { WEBHOOK_RETRY_BASE_MS: "1000" });
      const key = await accountKey(first.admin);
      const api = client(first.grpcAddress, key);

      // Receivers 0 and 1 fail (500): their deliveries wait in the queue for a retry. Receiver 2
      // never answers: its deliveries are in flight, leased by the replica, when it dies.
      let phase: "failing" | "healthy" = "failing";
      const secrets = ["", "", ""];
      const rx = await Promise.all([0, 1, 2].map((i) => startReceiver(() => secrets[i]!)));
      const answeredOk = rx.map(() => [] as Received[]);
      rx.forEach((receiver, i) => {
        receiver.reply = (request) => {
          if (phase === "healthy") {
            answeredOk[i]!.push(request);
            return 200;
          }
          return i === 2 ? "hang" : 500;
        };
      });
      const hooks = [];
      for (let i = 0; i < 3; i++) {
        const { webhook } = await api.webhooks.createWebhook({
          url: rx[i]!.url,
          events: ["request.completed"],
          secret: "",
          description: `receiver ${i}`,
        });
        secrets[i] = webhook!.secret;
        hooks.push(webhook!);
      }

      const EVENTS = 20;
      for (let seq = 0; seq < EVENTS; seq++) {
        const published = await api.webhooks.publishEvent({ event: "request.completed", data: { seq }, accountId: "" });
        expect(published.deliveries).toBe(3);
      }

      // Every delivery was tried: the failing ones are recorded with a retry due, the hanging ones
      // are held by the replica.
      await until(async () => {
        const { rows } = await db.query<{ n: number }>(
          "select count(distinct delivery_id)::int as n from webhook_attempts where status = 500",
        );
        return rows[0]!.n === 2 * EVENTS && new Set(rx[2]!.received.map(webhookId)).size === EVENTS;
      }, 20_000, "first attempts of every delivery");
      const killedAt = Date.now();
      expect(await first.process.kill("SIGKILL")).toEqual({ code: null, signal: "SIGKILL" });
      const before = rx.map((r) => r.received.length);
      expect(before[2]).toBe(EVENTS);
      const state = await db.query<{ state: string; leased: boolean; attempts: number }>(
        "select state, locked_until > now() as leased, attempts from webhook_deliveries",
      );
      expect(state.rows).toHaveLength(3 * EVENTS);
      // Nothing was over when the replica died: every delivery still has retries left.
      expect(state.rows.every((r) => r.state === "pending" && r.attempts <= 2)).toBe(true);
      expect(state.rows.filter((r) => r.leased).length).toBeGreaterThanOrEqual(EVENTS);

      phase = "healthy";
      const second = await startService(databaseUrl, { WEBHOOK_RETRY_BASE_MS: "200" });
      const secondStartedAt = Date.now();
      const api2 = client(second.grpcAddress, key);

      // The queued retries go out as soon as the fresh replica looks.
      await until(
        () => [0, 1].every((i) => new Set(answeredOk[i]!.map(webhookId)).size === EVENTS),
        15_000,
        "the failed deliveries retried by the fresh replica",
      );
      expect(Date.now() - secondStartedAt).toBeLessThan(10_000);
      // While it waits for those leases, the fresh replica idles: a held delivery is not due, so it
      // does not query the queue back to back (that loop ran some 900 transactions a second).
      const transactions = async () =>
        (
          await db.query<{ n: number }>(
            "select xact_commit::int as n from pg_stat_database where datname = current_database()",
          )
        ).rows[0]!.n;
      const before3s = await transactions();
      await sleep(3_000);
      expect(await transactions()).toBeLessThan(before3s + 300);
      // The dead replica's leases run out, then the fresh one claims those deliveries again.
      await until(
        () => new Set(answeredOk[2]!.map(webhookId)).size === EVENTS,
        LEASE_MS + 15_000,
        "the deliveries the dead replica held",
      );
      expect(Date.now() - killedAt).toBeLessThan(45_000);

      for (let i = 0; i < 3; i++) {
        const all = rx[i]!.received;
        // Every request carries a valid signature over its exact body.
        expect(all.every((r) => r.signatureValid)).toBe(true);
        expect(all.every((r) => r.headers["x-webhook-event"] === "request.completed")).toBe(true);
        // Every event reached every webhook with a 2xx answer.
        expect(new Set(answeredOk[i]!.map(seqOf))).toEqual(new Set(Array.from({ length: EVENTS }, (_, s) => s)));
        // One delivery per event: one X-Webhook-Id, the same body bytes and signature on every try.
        const bySeq = Map.groupBy(all, seqOf);
        expect(bySeq.size).toBe(EVENTS);
        for (const tries of bySeq.values()) {
          expect(new Set(tries.map(webhookId)).size).toBe(1);
          expect(new Set(tries.map((r) => r.rawBody)).size).toBe(1);
          expect(new Set(tries.map((r) => r.headers["x-webhook-signature"])).size).toBe(1);
          expect(new Set(tries.map((r) => r.headers["x-webhook-timestamp"])).size).toBe(1);
        }
      }
      const ids = rx.flatMap((r) => r.received.map(webhookId));
      expect(new Set(ids).size).toBe(3 * EVENTS);

      // No replica claimed a delivery whose lease was still running: the second try of a delivery
      // the dead replica held came no sooner than the lease allows.
      for (const id of new Set(rx[2]!.received.map(webhookId))) {
        const [held, retried] = rx[2]!.received.filter((r) => webhookId(r) === id);
        expect(retried).toBeDefined();
        expect(retried!.at - held!.at).toBeGreaterThanOrEqual(LEASE_MS - 1_000);
      }

      // The queue agrees: every delivery is over, and no attempt number was sent twice.
      await until(async () => {
        const { rows } = await db.query<{ n: number }>("select count(*)::int as n from webhook_deliveries where state = 'delivered'");
        return rows[0]!.n === 3 * EVENTS;
      }, 10_000, "every delivery recorded as delivered");
      const duplicates = await db.query(
        "select delivery_id, attempt from webhook_attempts group by delivery_id, attempt having count(*) > 1",
      );
      expect(duplicates.rows).toEqual([]);
      const { webhooks } = await api2.webhooks.listWebhooks({});
      for (const webhook of webhooks) {
        expect(webhook).toMatchObject({ enabled: true, failureCount: 0, lastStatus: 200, status: "active" });
      }
      // The held deliveries' second attempt is attempt 2 (the claim that died counted as attempt 1).
      const held = await api2.webhooks.listDeliveries({ webhookId: hooks[2]!.id, limit: 100 });
      expect(held.deliveries).toHaveLength(EVENTS);
      expect(held.deliveries.every((d) => d.attempt === 2 && d.status === 200 && d.success)).toBe(true);

      expect(await second.process.terminate()).toEqual({ code: 0, signal: null });
    },
  );

  it(
    "two replicas on one database deliver every delivery exactly once when receivers answer 2xx",
    { timeout: 120_000 },
    async () => {
      const databaseUrl = await createTestDatabase();
      const db = sql(databaseUrl);
      // Successful attempts are logged at debug: which replica sent what is read from them.
      const one = await startService(databaseUrl, { LOG_LEVEL: "debug" });
      const two = await startService(databaseUrl, { LOG_LEVEL: "debug" });
      const key = await accountKey(one.admin);
      const apis = [client(one.grpcAddress, key), client(two.grpcAddress, key)];

      const SECRET = "whsec_shared_secret_of_the_five_hooks";
      const receiver = await startReceiver(() => SECRET);
      const WEBHOOKS = 5;
      const EVENTS = 200;
      for (let w = 0; w < WEBHOOKS; w++) {
        await apis[w % 2]!.webhooks.createWebhook({
          url: `${receiver.url}?w=${w}`,
          events: ["*"],
          secret: SECRET,
          description: "",
        });
      }

      // Both replicas publish, ten calls in flight at a time.
      let next = 0;
      await Promise.all(
        Array.from({ length: 10 }, async () => {
          while (next < EVENTS) {
            const seq = next++;
            const { deliveries } = await apis[seq % 2]!.webhooks.publishEvent({
              event: "request.completed",
              data: { seq },
              accountId: "",
            });
            expect(deliveries).toBe(WEBHOOKS);
          }
        }),
      );

      await until(() => new Set(receiver.received.map(webhookId)).size === EVENTS * WEBHOOKS, 60_000, "every delivery received");
      await until(async () => {
        const { rows } = await db.query<{ n: number }>("select count(*)::int as n from webhook_deliveries where state = 'delivered'");
        return rows[0]!.n === EVENTS * WEBHOOKS;
      }, 10_000, "every delivery recorded");
      // Give a duplicate time to show up.
      await sleep(500);

      const received = receiver.received;
      expect(received.every((r) => r.signatureValid)).toBe(true);
      expect(received).toHaveLength(EVENTS * WEBHOOKS);
      expect(new Set(received.map(webhookId)).size).toBe(EVENTS * WEBHOOKS);
      // Each (event, webhook) pair arrived once: the queue names each delivery's webhook.
      const queued = await db.query<{ id: string; webhook_id: string }>("select id, webhook_id from webhook_deliveries");
      const hookOf = new Map(queued.rows.map((r) => [r.id, r.webhook_id]));
      expect(new Set(received.map((r) => `${seqOf(r)}/${hookOf.get(webhookId(r))}`)).size).toBe(EVENTS * WEBHOOKS);

      // Every (delivery, attempt) pair went out once, and every delivery needed only attempt 1.
      const attempts = await db.query<{ delivery_id: string; attempt: number; status: number }>(
        "select delivery_id, attempt, status from webhook_attempts",
      );
      expect(attempts.rows).toHaveLength(EVENTS * WEBHOOKS);
      expect(new Set(attempts.rows.map((r) => r.delivery_id))).toEqual(new Set(received.map(webhookId)));
      expect(attempts.rows.every((r) => r.attempt === 1 && r.status === 200)).toBe(true);
      const queue = await db.query<{ attempts: number }>("select attempts from webhook_deliveries");
      expect(queue.rows.every((r) => r.attempts === 1)).toBe(true);

      // The history the API shows agrees with what the receiver saw.
      const { webhooks } = await apis[0]!.webhooks.listWebhooks({});
      expect(webhooks).toHaveLength(WEBHOOKS);
      for (const webhook of webhooks) {
        expect(webhook).toMatchObject({ failureCount: 0, lastStatus: 200, status: "active" });
        const { deliveries } = await apis[1]!.webhooks.listDeliveries({ webhookId: webhook.id, limit: 100 });
        expect(deliveries).toHaveLength(100);
        const seen = new Set(received.map(webhookId).filter((id) => hookOf.get(id) === webhook.id));
        expect(seen.size).toBe(EVENTS);
        for (const d of deliveries) {
          expect(d).toMatchObject({ attempt: 1, status: 200, success: true, event: "request.completed" });
          expect(seen.has(d.deliveryId)).toBe(true);
        }
      }

      // Both replicas took part.
      const sent = [one, two].map((s) => s.process.logs.filter((l) => l.event === "webhook_attempt").length);
      expect(sent[0]! + sent[1]!).toBe(EVENTS * WEBHOOKS);
      expect(sent[0]).toBeGreaterThan(0);
      expect(sent[1]).toBeGreaterThan(0);
    },
  );

  it(
    "the retry backoff at its real pace: 4 attempts 1 s, 2 s and 4 s apart, then failed",
    { timeout: 60_000 },
    async () => {
      const databaseUrl = await createTestDatabase();
      const db = sql(databaseUrl);
      const service = await startService(databaseUrl); // WEBHOOK_RETRY_BASE_MS: the default, 1000
      const key = await accountKey(service.admin);
      const api = client(service.grpcAddress, key);
      let secret = "";
      const receiver = await startReceiver(() => secret);
      // 500 four times; a fifth attempt, if any came, would succeed and show.
      receiver.reply = () => (receiver.received.length <= 4 ? 500 : 200);
      const { webhook } = await api.webhooks.createWebhook({ url: receiver.url, events: [], secret: "", description: "" });
      secret = webhook!.secret;

      await api.webhooks.publishEvent({ event: "quota.exceeded", data: { used: 101 }, accountId: "" });
      const received = await receiver.waitFor(4, 20_000);
      await until(async () => {
        const { rows } = await db.query<{ state: string }>("select state from webhook_deliveries");
        return rows[0]?.state === "failed";
      }, 5_000, "the delivery recorded as failed");
      await sleep(1_500);
      expect(received).toHaveLength(4);

      const at = received.map((r) => r.at);
      const gaps = [at[1]! - at[0]!, at[2]! - at[1]!, at[3]! - at[2]!];
      expect(gaps[0]).toBeGreaterThanOrEqual(1_000 - 400);
      expect(gaps[0]).toBeLessThanOrEqual(1_000 + 400);
      expect(gaps[1]).toBeGreaterThanOrEqual(2_000 - 400);
      expect(gaps[1]).toBeLessThanOrEqual(2_000 + 400);
      expect(gaps[2]).toBeGreaterThanOrEqual(4_000 - 400);
      expect(gaps[2]).toBeLessThanOrEqual(4_000 + 400);
      expect(new Set(received.map(webhookId)).size).toBe(1);
      expect(received.every((r) => r.signatureValid && r.headers["x-webhook-event"] === "quota.exceeded")).toBe(true);

      const { webhook: after } = await api.webhooks.getWebhook({ webhookId: webhook!.id });
      expect(after).toMatchObject({ enabled: true, failureCount: 1, lastStatus: 500, status: "errored" });
      const { deliveries } = await api.webhooks.listDeliveries({ webhookId: webhook!.id, limit: 0 });
      expect(deliveries.map((d) => d.attempt)).toEqual([4, 3, 2, 1]);
      expect(new Set(deliveries.map((d) => d.deliveryId))).toEqual(new Set([webhookId(received[0]!)]));
      expect(deliveries.every((d) => d.status === 500 && !d.success)).toBe(true);
      // Attempts 1..3 announce the next; the last announces none.
      expect(deliveries[0]!.nextAttemptAt).toBeUndefined();
      for (const [d, backoff] of [
        [deliveries[3]!, 1_000],
        [deliveries[2]!, 2_000],
        [deliveries[1]!, 4_000],
      ] as const) {
        const planned = d.nextAttemptAt!.getTime() - d.createdAt!.getTime();
        expect(Math.abs(planned - backoff)).toBeLessThan(200);
      }
    },
  );
});
