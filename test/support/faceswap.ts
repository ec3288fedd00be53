import fs from "node:fs/promises";
import { expect } from "vitest";
import { ApiError } from "../../src/client/index.js";
import { createAccountWithKey } from "./accounts.js";
import type { TestApp } from "./app.js";

/** A funded account with a `faceswap` key (plus any extra scopes). */
export async function fundedAccount(
  t: TestApp,
  credits: number,
  plan: "free" | "pro" | "business" = "free",
  extraScopes: string[] = [],
): Promise<{ accountId: string; key: string }> {
  const account = await createAccountWithKey(t, ["faceswap", ...extraScopes]);
  if (credits !== 0) await t.admin.admin.grantCredits({ accountId: account.accountId, amount: credits, reason: "test" });
  if (plan !== "free") await t.admin.admin.setAccountPlan({ accountId: account.accountId, plan });
  return account;
}

/** Asks for an upload URL, PUTs the file's bytes to it and returns the `file_path`. */
export async function uploadFile(t: Pick<TestApp, "client">, key: string, type: string, extension: string, file: string | Buffer): Promise<string> {
  const { items } = await t.client(key).files.createUploadUrls({ items: [{ type, extension }] });
  const body = typeof file === "string" ? await fs.readFile(file) : file;
  const response = await fetch(items[0]!.uploadUrl, { method: "PUT", body });
  expect(response.status, await response.clone().text()).toBe(200);
  return items[0]!.filePath;
}

export type Transport = "grpc" | "http";
export const TRANSPORTS: Transport[] = ["grpc", "http"];

/**
 * One call's outcome, the same shape whichever transport carried it: `code` is the gRPC status
 * (0 on success), `status` the HTTP status (200 for a gRPC success), `body` the response in the
 * HTTP JSON shape (snake_case keys, timestamps as strings, get/cancel unwrapped to the project).
 */
export interface Outcome {
  transport: Transport;
  code: number;
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  message: string;
  reason: string | undefined;
  fields: string[];
  headers: Record<string, string>;
}

type Request = Record<string, unknown>;

/** The face swap API (and the account calls it needs) over one transport, requests written as HTTP JSON. */
export function api(t: TestApp, transport: Transport, key: string) {
  const grpc = async (call: (c: ReturnType<TestApp["client"]>) => Promise<unknown>, unwrap?: string): Promise<Outcome> => {
    try {
      const response = (await call(t.client(key))) as Record<string, unknown>;
      const body = toSnake(unwrap ? response[unwrap] : response);
      return { transport, code: 0, status: 200, body, message: "", reason: undefined, fields: [], headers: {} };
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      const fields = error.fieldViolations.map((v) => v.field);
      return { transport, code: error.code, status: 0, body: undefined, message: error.message, reason: error.reason, fields, headers: {} };
    }
  };
  const http = async (method: string, path: string, body?: unknown): Promise<Outcome> => {
    const result = await t.http(method, path, { token: key, body });
    const headers = Object.fromEntries(result.headers.entries());
    if (result.status < 400) {
      return { transport, code: 0, status: result.status, body: result.body, message: "", reason: undefined, fields: [], headers };
    }
    const details = (result.body?.details ?? []) as { "@type": string; field_violations?: { field: string }[]; reason?: string }[];
    return {
      transport,
      code: result.body?.code,
      status: result.status,
      body: result.body,
      message: result.body?.message ?? "",
      reason: details.find((d) => d["@type"].endsWith("google.rpc.ErrorInfo"))?.reason,
      fields: details.flatMap((d) => d.field_violations ?? []).map((v) => v.field),
      headers,
    };
  };
  const isGrpc = transport === "grpc";
  return {
    transport,
    createUploadUrls: (request: Request) =>
      isGrpc ? grpc((c) => c.files.createUploadUrls(toCamel(request))) : http("POST", "/v1/files/upload-urls", request),
    createFaceSwap: (request: Request) =>
      isGrpc ? grpc((c) => c.faceSwap.createFaceSwap(toCamel(request))) : http("POST", "/v1/face-swap", request),
    get: (id: string) =>
      isGrpc ? grpc((c) => c.videoProjects.getVideoProject({ id }), "project") : http("GET", `/v1/video-projects/${encodeURIComponent(id)}`),
    list: (request: { page_size?: number; page_token?: string } = {}) =>
      isGrpc
        ? grpc((c) => c.videoProjects.listVideoProjects(toCamel(request)))
        : http("GET", `/v1/video-projects?${new URLSearchParams(Object.entries(request).map(([k, v]): [string, string] => [k, String(v)]))}`),
    cancel: (id: string) =>
      isGrpc
        ? grpc((c) => c.videoProjects.cancelVideoProject({ id }), "project")
        : http("POST", `/v1/video-projects/${encodeURIComponent(id)}/cancel`, {}),
    delete: (id: string) =>
      isGrpc ? grpc((c) => c.videoProjects.deleteVideoProject({ id })) : http("DELETE", `/v1/video-projects/${encodeURIComponent(id)}`),
    account: async () => {
      const outcome = isGrpc ? await grpc((c) => c.account.getAccount({}), "account") : await http("GET", "/v1/account");
      expect(outcome.code, outcome.message).toBe(0);
      const body = outcome.body as Record<string, unknown>;
      return { ...body, credit_balance: Number(body.credit_balance), credits_reserved: Number(body.credits_reserved) } as {
        id: string;
        plan: string;
        credit_balance: number;
        credits_reserved: number;
      };
    },
  };
}

/** Asserts a failed call: the status code (and its HTTP mapping), and the field named in the details and the message. */
export function expectFailure(outcome: Outcome, code: number, httpStatus: number, field?: string): void {
  expect(outcome.code, `${outcome.transport}: ${outcome.message}`).toBe(code);
  if (outcome.transport === "http") {
    expect(outcome.status).toBe(httpStatus);
    expect(Object.keys(outcome.body).sort()).toEqual(["code", "details", "message"]);
  }
  if (field !== undefined) {
    expect(outcome.fields, outcome.message).toContain(field);
    expect(outcome.message).toContain(field);
  }
}

export function expectOk(outcome: Outcome): void {
  expect(outcome.code, `${outcome.transport}: ${outcome.message}`).toBe(0);
  expect(outcome.status).toBe(200);
}

/** `start_seconds` → `startSeconds`, recursively (the typed client's field names). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function toCamel(value: any): any {
  if (Array.isArray(value)) return value.map(toCamel);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()), toCamel(v)]));
}

/** The typed client's response in the HTTP JSON shape: snake_case keys, RFC 3339 timestamps, null for unset messages. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function toSnake(value: any): any {
  if (value === undefined) return null;
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return value.map(toSnake);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), toSnake(v)]));
}
