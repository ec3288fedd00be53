import { createHmac, timingSafeEqual } from "node:crypto";

export type UrlVerdict = { ok: true; maxBytes: number } | { ok: false; problem: "expired" | "bad_signature" };

/**
 * HMAC-signed URLs of this service's /blobs/ route, shaped like presigned S3 URLs: the method, the
 * key, the expiry (and for uploads the size limit) are signed, so none can be changed.
 */
export class UrlSigner {
  constructor(
    private readonly secret: string,
    private readonly baseUrl: () => string,
  ) {}

  sign(method: "GET" | "PUT", key: string, expiresAt: Date, maxBytes = 0): string {
    const expires = Math.floor(expiresAt.getTime() / 1000);
    const query = new URLSearchParams({ expires: String(expires) });
    if (maxBytes > 0) query.set("max_bytes", String(maxBytes));
    query.set("signature", this.mac(method, key, expires, maxBytes));
    return `${this.baseUrl()}/blobs/${key.split("/").map(encodeURIComponent).join("/")}?${query}`;
  }

  verify(method: string, key: string, query: URLSearchParams, now = Date.now()): UrlVerdict {
    const expires = Number(query.get("expires"));
    const maxBytes = Number(query.get("max_bytes") ?? 0);
    const given = Buffer.from(query.get("signature") ?? "", "base64url");
    const signedMethod = method === "HEAD" ? "GET" : method;
    const expected = Buffer.from(this.mac(signedMethod, key, expires, maxBytes), "base64url");
    if (!Number.isSafeInteger(expires) || !Number.isSafeInteger(maxBytes) || given.length !== expected.length) {
      return { ok: false, problem: "bad_signature" };
    }
    if (!timingSafeEqual(given, expected)) return { ok: false, problem: "bad_signature" };
    if (expires * 1000 < now) return { ok: false, problem: "expired" };
    return { ok: true, maxBytes };
  }

  private mac(method: string, key: string, expires: number, maxBytes: number): string {
    return createHmac("sha256", this.secret).update(`${method}\n${key}\n${expires}\n${maxBytes}`).digest("base64url");
  }
}
