import { Webhook as StandardWebhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { verifySignature } from "../src/webhooks/signature.js";
import { failure } from "./support/expect.js";
import type { Received } from "./support/receiver.js";
import { useWebhookApp } from "./support/webhook-app.js";

const bed = useWebhookApp();
const { api, receiver } = bed;

/** The standardwebhooks package's own verifier, as a receiver would run it; throws when it refuses. */
function standardVerify(secret: string, r: Received): unknown {
  return new StandardWebhook(secret).verify(r.rawBody, r.headers as Record<string, string>);
}

describe("Standard Webhooks", () => {
  it("signs so the standardwebhooks verifier accepts, with webhook-id stable across retries", async () => {
    const r = await receiver();
    let calls = 0;
    r.reply = () => (++calls === 1 ? 500 : 200);
    const { webhook } = await api().createWebhook({ url: r.url, signatureScheme: "standard-webhooks" });
    expect(webhook).toMatchObject({ signatureScheme: "standard-webhooks" });
    expect(webhook!.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    const data = { trace_id: "t-9", note: "ünïcode ✓" };
    await api().publishEvent({ event: "request.completed", data });
    const [first, second] = await r.waitFor(2);
    for (const got of [first!, second!]) {
      expect(standardVerify(webhook!.secret, got)).toEqual({ event: "request.completed", timestamp: expect.any(String), data });
      expect(got.headers["webhook-timestamp"]).toMatch(/^\d{10}$/);
      expect(Math.abs(Number(got.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(30);
      expect(got.headers["webhook-id"]).toBe(got.headers["x-webhook-id"]);
      expect(got.headers["x-webhook-signature"]).toBeUndefined();
    }
    expect(second!.headers["webhook-id"]).toBe(first!.headers["webhook-id"]);
    // Another secret, or a changed byte, is refused by the same verifier.
    expect(() => standardVerify(`whsec_${Buffer.alloc(24, 7).toString("base64")}`, first!)).toThrow(/No matching signature/);
    expect(() => standardVerify(webhook!.secret, { ...first!, rawBody: first!.rawBody.replace("t-9", "t-8") })).toThrow();
  });

  it("signs every kind's body: a Slack message verifies too", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, kind: "slack", signatureScheme: "standard-webhooks" });
    expect(await api().testWebhook({ webhookId: webhook!.id })).toMatchObject({ delivered: true });
    const verified = standardVerify(webhook!.secret, r.received[0]!) as { text: string };
    expect(verified.text).toContain("test.ping");
  });

  it("keeps the previous secret signing for 24 hours after a rotation: a second v1 entry", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, signatureScheme: "standard-webhooks" });
    const next = `whsec_${Buffer.alloc(32, 9).toString("base64")}`;
    const rotated = (await api().updateWebhook({ webhookId: webhook!.id, secret: next })).webhook!;
    expect(rotated.secret).toBe(next);
    const expires = rotated.previousSecretExpiresAt!.getTime() - Date.now();
    expect(expires).toBeGreaterThan(24 * 3600_000 - 60_000);
    expect(expires).toBeLessThanOrEqual(24 * 3600_000);

    await api().testWebhook({ webhookId: webhook!.id });
    const during = r.received[0]!;
    expect(String(during.headers["webhook-signature"]).split(" ")).toHaveLength(2);
    expect(standardVerify(next, during)).toBeTruthy();
    expect(standardVerify(webhook!.secret, during)).toBeTruthy();

    // Once the 24 hours are over, only the new secret signs.
    await bed.t.app.db.updateTable("webhooks").set({ previous_secret_expires_at: new Date(Date.now() - 1000) }).where("id", "=", webhook!.id).execute();
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook!.previousSecretExpiresAt).toBeUndefined();
    await api().publishEvent({ event: "request.completed", data: {} });
    const [, after] = await r.waitFor(2);
    expect(String(after!.headers["webhook-signature"]).split(" ")).toHaveLength(1);
    expect(standardVerify(next, after!)).toBeTruthy();
    expect(() => standardVerify(webhook!.secret, after!)).toThrow(/No matching signature/);
  });

  it("rotates under the default 'seed' scheme with X-Webhook-Signature-Previous", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url });
    expect(webhook).toMatchObject({ signatureScheme: "seed" });
    const next = "a-brand-new-secret-0123456789";
    const put = await bed.t.http("PUT", `/api/webhooks/${webhook!.id}`, { token: bed.user.key, body: { secret: next } });
    expect(put.body.previous_secret_expires_at).toMatch(/^\d{4}-/);
    // Setting the same secret again is no rotation: the replaced one stays the original.
    await api().updateWebhook({ webhookId: webhook!.id, secret: next });
    await api().testWebhook({ webhookId: webhook!.id });
    const got = r.received[0]!;
    expect(verifySignature(next, got.rawBody, got.headers["x-webhook-signature"] as string)).toBe(true);
    expect(verifySignature(webhook!.secret, got.rawBody, got.headers["x-webhook-signature-previous"] as string)).toBe(true);
    expect(got.headers["webhook-signature"]).toBeUndefined();
  });

  it("moving to standard-webhooks with a new secret drops a replaced secret that cannot sign in it, rather than claiming it signs", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, secret: "plain secret with spaces !!" });
    const next = `whsec_${Buffer.alloc(32, 5).toString("base64")}`;
    const moved = (await api().updateWebhook({ webhookId: webhook!.id, signatureScheme: "standard-webhooks", secret: next })).webhook!;
    expect(moved.previousSecretExpiresAt).toBeUndefined();
    await api().testWebhook({ webhookId: webhook!.id });
    expect(String(r.received[0]!.headers["webhook-signature"]).split(" ")).toHaveLength(1);
    expect(standardVerify(next, r.received[0]!)).toBeTruthy();
  });

  it("switches an existing webhook's scheme when its secret fits, over HTTP", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/s" });
    const switched = await bed.t.http("PUT", `/api/webhooks/${webhook!.id}`, { token: bed.user.key, body: { signature_scheme: "standard-webhooks" } });
    expect(switched.status).toBe(200);
    expect(switched.body).toMatchObject({ signature_scheme: "standard-webhooks", secret: webhook!.secret });
  });

  it.each<[string, { signatureScheme: string; secret?: string }, string]>([
    ["an unknown scheme", { signatureScheme: "hmac-md5" }, "signature_scheme"],
    ["a standard-webhooks secret that is not whsec_ + base64", { signatureScheme: "standard-webhooks", secret: "my-own-secret-0123456789" }, "secret"],
    ["a standard-webhooks key under 24 bytes", { signatureScheme: "standard-webhooks", secret: `whsec_${Buffer.alloc(16).toString("base64")}` }, "secret"],
  ])("refuses %s naming the field, over both transports", async (_label, fields, field) => {
    const grpc = await failure(api().createWebhook({ url: "http://127.0.0.1:9/bad", ...fields }));
    expect(grpc.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpc.fieldViolations.map((v) => v.field)).toEqual([field]);
    const body = { url: "http://127.0.0.1:9/bad", signature_scheme: fields.signatureScheme, secret: fields.secret };
    const http = await bed.t.http("POST", "/api/webhooks", { token: bed.user.key, body });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations[0].field).toBe(field);
  });

  it("refuses switching to standard-webhooks while the secret does not fit, naming secret", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/s", secret: "my-own-secret-0123456789" });
    const error = await failure(api().updateWebhook({ webhookId: webhook!.id, signatureScheme: "standard-webhooks" }));
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["secret"]);
    const fresh = `whsec_${Buffer.alloc(24, 1).toString("base64")}`;
    const both = await api().updateWebhook({ webhookId: webhook!.id, signatureScheme: "standard-webhooks", secret: fresh });
    expect(both.webhook).toMatchObject({ signatureScheme: "standard-webhooks", secret: fresh });
  });
});
