import { randomUUID } from "node:crypto";
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import type { Credential, Principal, Scope } from "../platform/auth.js";
import type { Logger } from "../platform/logger.js";

/** What a handler knows about the call it serves, whichever transport carried it. */
export interface CallContext {
  /** Full method path, e.g. `/v1.NamespaceService/GetNamespace`. */
  readonly method: string;
  readonly requestId: string;
  /** The caller; methods of a public service see an anonymous principal with no scopes. */
  readonly principal: Principal;
  /** Aborted when the client cancels, disconnects or its deadline passes. */
  readonly signal: AbortSignal;
  readonly logger: Logger;
  /** Adds a response header (gRPC initial metadata, an HTTP response header). */
  setResponseHeader(name: string, value: string): void;
}

export type UnaryHandler<Req, Res> = (request: Req, ctx: CallContext) => Promise<Res>;

/**
 * A server-streaming method: sends responses until it returns (the stream ends OK) or throws (it
 * ends with that error). `send` resolves once the transport can take more.
 */
export type ServerStreamHandler<Req, Res> = (request: Req, ctx: CallContext, send: (response: Res) => Promise<void>) => Promise<void>;

type HandlersOf<S extends ServiceDefinition> = {
  [K in keyof S]: S[K] extends MethodDefinition<infer Req, infer Res> & { responseStream: true }
    ? ServerStreamHandler<Req, Res>
    : S[K] extends MethodDefinition<infer Req, infer Res>
      ? UnaryHandler<Req, Res>
      : never;
};

/** One gRPC service (ts-proto's grpc-js definition) with its handlers and the scope they need. */
/** A scope, or "authenticated": any API key (not a namespace token) may call it. */
export type RequiredScope = Scope | "authenticated";

export interface ServiceImplementation<S extends ServiceDefinition = ServiceDefinition> {
  definition: S;
  scope: RequiredScope;
  /** Methods that need another scope than the service's, by handler key. */
  methodScopes: Partial<Record<keyof S, Scope>>;
  /** Whether a namespace's token may call it (the handlers then confine it to its namespace). */
  acceptsNamespaceTokens: boolean;
  /**
   * Whether HTTP responses show unset message fields as `null` rather than leaving them out (proto3
   * JSON), for REST clients that expect every key (Magic Hour's SDK validates with `.nullable()`).
   */
  nullWhenUnset: boolean;
  handlers: HandlersOf<S>;
}

export function defineService<S extends ServiceDefinition>(
  definition: S,
  scope: RequiredScope,
  handlers: HandlersOf<S>,
  {
    acceptsNamespaceTokens = false,
    methodScopes = {},
    nullWhenUnset = false,
  }: { acceptsNamespaceTokens?: boolean; methodScopes?: Partial<Record<keyof S, Scope>>; nullWhenUnset?: boolean } = {},
): ServiceImplementation {
  return { definition, scope, handlers, acceptsNamespaceTokens, methodScopes, nullWhenUnset } as unknown as ServiceImplementation;
}

/** What a transport hands over with each call. */
export interface IncomingCall {
  transport: "grpc" | "http";
  credential: Credential | undefined;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
  /** Epoch milliseconds, or undefined for no deadline. */
  deadline: number | undefined;
  /** From requestIdOf: the caller's x-request-id when well-formed, else a new one. */
  requestId: string;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's `x-request-id` when well-formed, else a new one; every response carries it back. */
export function requestIdOf(incoming: unknown): string {
  return typeof incoming === "string" && REQUEST_ID.test(incoming) ? incoming : randomUUID();
}

const reused = new WeakSet<object>();

/**
 * Marks a response that a handler hands out, unchanged, to many calls (it comes from a cache): the
 * Router encodes it once for all of them. Nothing may change it afterwards.
 */
export function reusedResponse<T extends object>(response: T): T {
  reused.add(response);
  return response;
}

export function isReusedResponse(response: unknown): response is object {
  return typeof response === "object" && response !== null && reused.has(response);
}

export interface CallResult<Res> {
  response: Res;
  headers: Record<string, string>;
}
