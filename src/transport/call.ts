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
  /**
   * For a call that waits (a blocking query): `signal`, also aborted when the server begins to shut
   * down (reason an UNAVAILABLE RpcError) and when the call's API key is revoked or expires (reason
   * the UNAUTHENTICATED RpcError the call must end with).
   */
  lasting(): AbortSignal;
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

/** On a reused response: its protobuf bytes once encoded, null until then. */
const ENCODED = Symbol("encoded");
type Reused = { [ENCODED]?: Buffer | null };

/** Reused responses by what they were built from, then by whatever else they depend on. */
const reused = new WeakMap<object, Map<unknown, object>>();

/**
 * The response `build` makes from `source`, a cached value that is replaced rather than changed (a
 * namespace row, a service's instance list), for `variant` (what else it depends on, such as
 * whether the caller may edit): built once and handed, unchanged, to every call asking with the same
 * source and variant, and encoded once for all of them (see encodedOnce). It goes when its source
 * does. Nothing may change it afterwards.
 */
export function reusedResponse<T extends object>(source: object, variant: unknown, build: () => T): T {
  let variants = reused.get(source);
  if (!variants) reused.set(source, (variants = new Map()));
  let response = variants.get(variant) as T | undefined;
  if (!response) {
    response = build();
    // A symbol key: invisible to the encoders and to JSON, unlike a field.
    (response as Reused)[ENCODED] = null;
    variants.set(variant, response);
  }
  return response;
}

/** The response's bytes: `encode` makes them, once only for a reused response. */
export function encodedOnce(response: unknown, encode: (response: unknown) => Buffer): Buffer {
  if (typeof response !== "object" || response === null || !(ENCODED in response)) return encode(response);
  return ((response as Reused)[ENCODED] ??= encode(response));
}

export interface CallResult<Res> {
  response: Res;
  headers: Record<string, string>;
}
