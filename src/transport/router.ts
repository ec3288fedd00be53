import type { MethodDefinition } from "@grpc/grpc-js";
import type { DescMethod } from "@bufbuild/protobuf";
import { hasScope, type Authenticator, type Credential, type KeyChanges, type Principal } from "../platform/auth.js";
import { Code, internalError, permissionDenied, RpcError, unauthenticated } from "../platform/errors.js";
import type { Logger } from "../platform/logger.js";
import type { Counter, CounterSeries, Histogram, HistogramSeries, Metrics } from "../platform/metrics.js";
import { encodedOnce, type CallContext, type CallResult, type IncomingCall, type RequiredScope, type ServiceImplementation } from "./call.js";
import { registry } from "./descriptors.js";
import { decodeRequest } from "./request-decoder.js";

/** One method, ready to be invoked by either transport (a streaming one by gRPC only). */
export interface RoutedMethod {
  /** `/package.Service/Method` */
  path: string;
  /** The key of the method in ts-proto's service definition (e.g. `getNamespace`). */
  key: string;
  definition: MethodDefinition<unknown, unknown>;
  /** The method in the descriptor set (input and output message types, options). */
  descriptor: DescMethod;
  service: ServiceImplementation;
  /** Whether the method streams responses; then `stream` serves it, else `invoke`. */
  responseStream: boolean;
  /** The response's protobuf bytes (encoded once for a reused response, see reusedResponse). */
  serialize(response: unknown): Buffer;
  /**
   * Decodes and checks the request's protobuf bytes (see decodeRequest), calls the handler, and
   * `encode`s its response as the transport sends it: inside the call, so a response that cannot be
   * encoded ends it INTERNAL, logged and counted so, not OK.
   */
  invoke<T>(request: Uint8Array, call: IncomingCall, encode: (response: unknown) => T): Promise<CallResult<T>>;
  /** As invoke, for a server-streaming method: `send` gets each response with the response headers. */
  stream(request: Uint8Array, call: IncomingCall, send: (response: unknown, headers: Record<string, string>) => Promise<void>): Promise<void>;
}

/** A unary or server-streaming handler, as the Router calls it (`send` only for streams). */
type AnyHandler = (request: unknown, ctx: CallContext, send?: (response: unknown) => Promise<void>) => Promise<unknown>;

export interface RouterOptions {
  services: ServiceImplementation[];
  authenticate: Authenticator;
  keyChanges: KeyChanges;
  logger: Logger;
  metrics: Metrics;
}

/**
 * The interceptor chain every call goes through, the same for gRPC and HTTP: request decoding and
 * checks, request id, deadline, authentication and scope, the handler, error mapping (anything that is not an RpcError becomes an
 * INTERNAL error carrying the request id, logged, never shown), and one log line and metric per call.
 * A server stream goes through the same chain; its log line and metric come when it ends, and it
 * ends UNAUTHENTICATED when its API key is revoked.
 */
export class Router {
  readonly methods = new Map<string, RoutedMethod>();
  private readonly requests: Counter<"method" | "code" | "transport">;
  private readonly durations: Histogram<"method" | "transport">;
  private readonly authenticate: Authenticator;
  /** Open streams by the id of the API key they authenticated with: the controller that ends each, and its credential. */
  private readonly streamsByKey = new Map<string, Map<AbortController, Credential | undefined>>();
  /** What each method records of its calls, by transport (see CallRecorder). */
  private readonly recorders = new Map<string, Record<IncomingCall["transport"], CallRecorder>>();
  /** Also used by the transports for faults outside any call. */
  readonly logger: Logger;
  /** Aborted when the server begins to shut down: calls that wait answer then (see CallContext.lasting). */
  private readonly closing = new AbortController();

  constructor({ services, authenticate, keyChanges, logger, metrics }: RouterOptions) {
    this.authenticate = authenticate;
    keyChanges((changed) => this.checkKeysAgain(changed));
    this.logger = logger;
    this.requests = metrics.counter("atrium_rpc_requests_total", "Calls finished, by method, status code and transport.", [
      "method",
      "code",
      "transport",
    ]);
    this.durations = metrics.histogram("atrium_rpc_duration_seconds", "Time from a call's arrival to its answer, in seconds.", [
      "method",
      "transport",
    ]);
    for (const service of services) {
      for (const [key, definition] of Object.entries(service.definition)) {
        const handler = (service.handlers as Record<string, AnyHandler>)[key];
        if (!handler) throw new Error(`no handler for ${definition.path}`);
        const scope = service.methodScopes[key] ?? service.scope;
        const [, serviceName, methodName] = definition.path.split("/");
        const descriptor = registry.getService(serviceName!)?.methods.find((m) => m.name === methodName);
        if (!descriptor) throw new Error(`${definition.path} is missing from the descriptor set`);
        const unary = (request: unknown, ctx: CallContext) => handler(request, ctx);
        const method: RoutedMethod = {
          path: definition.path,
          key,
          definition: definition as MethodDefinition<unknown, unknown>,
          descriptor,
          service,
          responseStream: definition.responseStream,
          serialize: (response) => encodedOnce(response, definition.responseSerialize),
          invoke: (request, call, encode) => this.run(method, scope, request, call, unary, encode),
          stream: async (request, call, send) => {
            await this.run(
              method, scope, request, call,
              (decoded, ctx, headers) => handler(decoded, ctx, (response) => send(response, headers)),
              () => undefined,
            );
          },
        };
        this.methods.set(definition.path, method);
        const recorder = (transport: IncomingCall["transport"]): CallRecorder => ({
          logger: logger.child({ event: "rpc", transport, method: definition.path }),
          duration: this.durations.seriesOf({ method: definition.path, transport }),
          codes: new Map(),
        });
        this.recorders.set(definition.path, { grpc: recorder("grpc"), http: recorder("http") });
      }
    }
  }

  /** Runs `body` inside the chain; returns what it returned, `encode`d, with the response headers. */
  private async run<T>(
    method: RoutedMethod,
    scope: RequiredScope,
    bytes: Uint8Array,
    call: IncomingCall,
    body: (request: unknown, ctx: CallContext, headers: Record<string, string>) => Promise<unknown>,
    encode: (response: unknown) => T,
  ): Promise<CallResult<T>> {
    const { path, service } = method;
    const started = performance.now();
    const { requestId } = call;
    const headers: Record<string, string> = { "x-request-id": requestId };
    // The transport's signal is the call's, unless the call can end for reasons of its own: its
    // deadline passing, or (a stream) its API key being revoked meanwhile.
    const own = call.deadline !== undefined || method.responseStream ? new AbortController() : undefined;
    // Most calls have nothing to clean up: no array for them.
    let cleanups: (() => void)[] | undefined;
    if (own) cleanups = [abortWith(call.signal, own)];
    let principal: Principal | undefined;
    let ctx: RoutedCallContext | undefined;
    try {
      const request = decodeRequest(method.descriptor.input, bytes, method.definition.requestDeserialize);
      if (own && call.deadline !== undefined) {
        const remaining = call.deadline - Date.now();
        if (remaining <= 0) throw new RpcError(Code.DEADLINE_EXCEEDED, "deadline exceeded before the call started");
        const timer = setTimeout(() => own.abort(new Error("deadline exceeded")), remaining);
        cleanups!.push(() => clearTimeout(timer));
      }
      principal = await this.authenticate(call.credential);
      if (principal.namespace !== undefined) {
        if (!service.acceptsNamespaceTokens) {
          throw permissionDenied(`${path} does not accept namespace tokens; use an API key`, "NAMESPACE_TOKEN_NOT_ALLOWED");
        }
      } else if (scope !== "authenticated" && !hasScope(principal, scope)) {
        throw permissionDenied(`this API key lacks the "${scope}" scope`, "MISSING_SCOPE");
      }
      if (own && method.responseStream) cleanups!.push(this.endWhenKeyEnds(principal, call.credential, own), this.endOnClose(own));
      ctx = new RoutedCallContext(this, path, requestId, principal, this.logger, headers, call, own);
      const response = encode(await body(request, ctx, headers));
      if (deadlinePassed(own, call)) throw new RpcError(Code.DEADLINE_EXCEEDED, "deadline exceeded");
      this.record(method, call, requestId, principal, Code.OK, started);
      return { response, headers };
    } catch (error) {
      // A stream cut short by its deadline throws whatever its handler makes of the abort.
      const rpcError = deadlinePassed(own, call)
        ? new RpcError(Code.DEADLINE_EXCEEDED, "deadline exceeded")
        : this.toRpcError(error, path, requestId);
      this.record(method, call, requestId, principal, rpcError.code, started, rpcError);
      throw rpcError;
    } finally {
      if (cleanups) for (const cleanup of cleanups) cleanup();
      ctx?.end();
    }
  }

  /**
   * Begins a shutdown for the calls that never finish on their own: streams end UNAVAILABLE, which
   * tells their clients to reconnect elsewhere and resume, and blocking queries answer (see
   * CallContext.lasting). The transports drain the rest.
   */
  close(): void {
    this.closing.abort(new RpcError(Code.UNAVAILABLE, "the server is shutting down; reconnect and resume from the last revision"));
  }

  /** Ends `controller` when a shutdown begins (at once if one has); returns the function that stops watching. */
  private endOnClose(controller: AbortController): () => void {
    return abortWith(this.closing.signal, controller);
  }

  /**
   * A signal for a call that waits (a blocking query): aborted when `base` is (the client went away),
   * when the server begins to shut down, and when the call's API key is revoked or expires (the
   * reason then the RpcError the call must end with). Returns it with the function that stops watching.
   */
  lasting(base: AbortSignal, principal: Principal, credential: Credential | undefined): { signal: AbortSignal; stop: () => void } {
    const controller = new AbortController();
    const stopBase = abortWith(base, controller);
    // A query that arrives while the server drains answers at once, as one waiting then did.
    const stopClose = this.endOnClose(controller);
    const stopKey = this.endWhenKeyEnds(principal, credential, controller);
    return {
      signal: controller.signal,
      stop: () => {
        stopBase();
        stopClose();
        stopKey();
      },
    };
  }

  /**
   * A call that outlives its authentication (a stream, a blocking query) ends UNAUTHENTICATED when its
   * API key is revoked or changed on any replica (see endWhenKeyWithdrawn), and when the key expires.
   */
  private endWhenKeyEnds(principal: Principal, credential: Credential | undefined, own: AbortController): () => void {
    if (principal.keyId === "") return () => {};
    const stopWatching = this.endWhenKeyWithdrawn(principal.keyId, credential, own);
    if (principal.expiresAt === undefined) return stopWatching;
    const stopTimer = atTime(principal.expiresAt, () => own.abort(unauthenticated("this API key has expired", "API_KEY_EXPIRED")));
    return () => {
      stopWatching();
      stopTimer();
    };
  }

  /**
   * A stream outlives the authentication it started with: when its key is revoked or changed on any
   * replica, the key is checked again, and a refusal (revoked, expired) ends the stream with it.
   * Returns the function that stops watching.
   */
  private endWhenKeyWithdrawn(keyId: string, credential: Credential | undefined, own: AbortController): () => void {
    let streams = this.streamsByKey.get(keyId);
    if (!streams) this.streamsByKey.set(keyId, (streams = new Map()));
    streams.set(own, credential);
    return () => {
      streams.delete(own);
      if (streams.size === 0 && this.streamsByKey.get(keyId) === streams) this.streamsByKey.delete(keyId);
    };
  }

  /**
   * Checks the changed key (undefined: every key) once for all the streams it opened, which present
   * the same key: a stream each cost a thousand lookups at once for a thousand streams.
   */
  private checkKeysAgain(changed: string | undefined): void {
    const affected = changed === undefined ? [...this.streamsByKey] : [[changed, this.streamsByKey.get(changed)] as const];
    for (const [keyId, streams] of affected) {
      const [credential] = streams?.values() ?? [];
      if (!streams || !credential) continue;
      this.authenticate(credential).catch((error: unknown) => {
        if (!(error instanceof RpcError)) {
          this.logger.warn({ event: "stream_key_check_failed", key_id: keyId, streams: streams.size, err: error }, "could not check the API key of streams again");
          return;
        }
        for (const own of [...streams.keys()]) own.abort(error);
      });
    }
  }

  private toRpcError(error: unknown, path: string, requestId: string): RpcError {
    if (error instanceof RpcError) return error;
    this.logger.error({ event: "rpc_internal_error", method: path, request_id: requestId, err: error }, "unexpected error");
    return internalError(requestId);
  }

  private record(
    method: RoutedMethod,
    call: IncomingCall,
    requestId: string,
    principal: Principal | undefined,
    code: Code,
    started: number,
    error?: RpcError,
  ): void {
    const ms = performance.now() - started;
    const { transport } = call;
    const recorder = this.recorders.get(method.path)![transport];
    let requests = recorder.codes.get(code);
    if (!requests) recorder.codes.set(code, (requests = this.requests.seriesOf({ method: method.path, code: Code[code], transport })));
    requests.inc();
    recorder.duration.observe(ms / 1000);
    const fields: Record<string, unknown> = {
      code: Code[code],
      duration_ms: Math.round(ms * 1000) / 1000,
      request_id: requestId,
      account_id: principal?.accountId,
    };
    if (error) {
      fields.reason = error.reason;
      fields.message = error.message;
    }
    recorder.logger.info(fields, "rpc");
  }
}

/**
 * A method's log line fields that never change, serialised once (a pino child), and its metric
 * series for one transport, held rather than looked up by their labels on every call. Only routed
 * paths have one, so the method label takes a bounded set of values.
 */
interface CallRecorder {
  logger: Logger;
  duration: HistogramSeries;
  /** Calls finished, by status code: made on a code's first call, so /metrics lists only codes seen. */
  codes: Map<Code, CounterSeries>;
}

/** What a handler gets; a class rather than an object literal, so that a call makes no closures for it. */
class RoutedCallContext implements CallContext {
  private lastingSignal: { signal: AbortSignal; stop: () => void } | undefined;

  constructor(
    private readonly router: Router,
    readonly method: string,
    readonly requestId: string,
    readonly principal: Principal,
    readonly logger: Logger,
    private readonly headers: Record<string, string>,
    private readonly call: IncomingCall,
    private readonly own: AbortController | undefined,
  ) {}

  /** Read only by the handlers that wait (a transport may make its signal on first use). */
  get signal(): AbortSignal {
    return this.own?.signal ?? this.call.signal;
  }

  lasting(): AbortSignal {
    this.lastingSignal ??= this.router.lasting(this.signal, this.principal, this.call.credential);
    return this.lastingSignal.signal;
  }

  setResponseHeader(name: string, value: string): void {
    this.headers[name.toLowerCase()] = value;
  }

  /** The call is over: stops what lasting() watches. */
  end(): void {
    this.lastingSignal?.stop();
  }
}

/** Aborts `target` with `source`'s reason when `source` aborts (at once if it has); returns the function that stops watching. */
function abortWith(source: AbortSignal, target: AbortController): () => void {
  const onAbort = () => target.abort(source.reason);
  if (source.aborted) onAbort();
  else source.addEventListener("abort", onAbort, { once: true });
  return () => source.removeEventListener("abort", onAbort);
}

/** Node's timers take at most this many milliseconds; a later time is waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Calls `fire` at epoch milliseconds `at` (at once if past); returns the function that cancels it. */
function atTime(at: number, fire: () => void): () => void {
  let timer: NodeJS.Timeout;
  const arm = () => {
    const wait = at - Date.now();
    timer = setTimeout(wait > MAX_TIMER_MS ? arm : fire, Math.min(Math.max(0, wait), MAX_TIMER_MS));
  };
  arm();
  return () => clearTimeout(timer);
}

/** `own` is the call's own controller, which exists whenever it has a deadline. */
function deadlinePassed(own: AbortController | undefined, call: IncomingCall): boolean {
  return own !== undefined && own.signal.aborted && call.deadline !== undefined && Date.now() >= call.deadline;
}
