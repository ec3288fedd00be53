import {
  credentials as grpcCredentials,
  makeGenericClientConstructor,
  Metadata,
  type CallOptions,
  type Client,
  type ClientReadableStream,
  type ClientOptions,
  type MethodDefinition,
  type ServiceDefinition,
  type ServiceError,
} from "@grpc/grpc-js";
import { registry } from "../transport/descriptors.js";
import { ApiError } from "./errors.js";

type DeepPartial<T> = T extends Date | Buffer | Uint8Array | string | number | boolean | undefined
  ? T
  : T extends Array<infer U>
    ? Array<DeepPartial<U>>
    : T extends object
      ? { [K in keyof T]?: DeepPartial<T[K]> }
      : Partial<T>;

export interface CallSettings {
  /** Milliseconds until the call's deadline. */
  timeoutMs?: number;
  signal?: AbortSignal;
  metadata?: Record<string, string>;
}

/** The responses of a server-streaming call, read with `for await`; `cancel` ends the call. */
export interface ResponseStream<Res> extends AsyncIterable<Res> {
  cancel(): void;
}

/**
 * A service's methods as promises (server-streaming ones as response streams); requests may leave
 * fields out (they take their defaults).
 */
export type PromiseClient<S extends ServiceDefinition> = {
  [K in keyof S]: S[K] extends MethodDefinition<infer Req, infer Res> & { responseStream: true }
    ? (request?: DeepPartial<Req>, settings?: CallSettings) => ResponseStream<Res>
    : S[K] extends MethodDefinition<infer Req, infer Res>
      ? (request?: DeepPartial<Req>, settings?: CallSettings) => Promise<Res>
      : never;
} & { close(): void };

type MessageModule = Record<string, unknown>;
type UnaryMethod = (
  request: unknown,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (error: ServiceError | null, response: unknown) => void,
) => { cancel(): void };
type StreamMethod = (request: unknown, metadata: Metadata, options: Partial<CallOptions>) => ClientReadableStream<unknown>;

/**
 * Channel options every client here starts from. grpc-js gives a connection a 64 KiB receive window
 * by default, shared by every call on it: with many calls in flight, each answered with a list
 * (100 instances are about 12 KB), the server spends most of its time waiting for the window to
 * reopen rather than answering. A few MiB lets the answers of every call in flight arrive at once.
 */
export const CHANNEL_DEFAULTS: Partial<ClientOptions> = { "grpc-node.flow_control_window": 4 * 2 ** 20 };

export interface ConnectOptions {
  /** host:port of the gRPC server. */
  address: string;
  /** An API key, sent as `authorization: Bearer <token>`. */
  token?: string;
  /** grpc-js channel options, over CHANNEL_DEFAULTS. */
  channelOptions?: Partial<ClientOptions>;
}

/**
 * Wraps a ts-proto grpc-js service definition as a promise client. `messages` is the generated
 * module holding the request types, whose `fromPartial` fills in defaults.
 */
export function promiseClient<S extends ServiceDefinition>(
  definition: S,
  messages: MessageModule,
  options: ConnectOptions,
): PromiseClient<S> {
  const first = Object.values(definition)[0] as MethodDefinition<unknown, unknown> | undefined;
  const serviceName = first?.path.split("/")[1] ?? "";
  const Constructor = makeGenericClientConstructor(definition, serviceName);
  const client = new Constructor(options.address, grpcCredentials.createInsecure(), {
    ...CHANNEL_DEFAULTS,
    ...options.channelOptions,
  }) as Client &
    Record<string, UnaryMethod>;
  const service = registry.getService(serviceName);

  const wrapped: Record<string, unknown> = { close: () => client.close() };
  for (const [key, method] of Object.entries(definition)) {
    const inputName = service?.methods.find((m) => `/${serviceName}/${m.name}` === method.path)?.input.name;
    const codec = inputName ? (messages[inputName] as { fromPartial?: (v: unknown) => unknown }) : undefined;
    const prepare = (request: unknown, settings: CallSettings) => {
      const metadata = new Metadata();
      if (options.token) metadata.set("authorization", `Bearer ${options.token}`);
      for (const [name, value] of Object.entries(settings.metadata ?? {})) metadata.set(name, value);
      const callOptions: Partial<CallOptions> = {};
      if (settings.timeoutMs !== undefined) callOptions.deadline = Date.now() + settings.timeoutMs;
      return { message: codec?.fromPartial ? codec.fromPartial(request) : request, metadata, callOptions };
    };
    wrapped[key] = method.responseStream
      ? (request: unknown = {}, settings: CallSettings = {}) => {
          const { message, metadata, callOptions } = prepare(request, settings);
          const call = (client[key] as unknown as StreamMethod).call(client, message, metadata, callOptions);
          settings.signal?.addEventListener("abort", () => call.cancel(), { once: true });
          return responseStream(call);
        }
      : (request: unknown = {}, settings: CallSettings = {}) =>
          new Promise((resolve, reject) => {
            const { message, metadata, callOptions } = prepare(request, settings);
            const call = client[key]!.call(client, message, metadata, callOptions, (error, response) =>
              error ? reject(new ApiError(error)) : resolve(response),
            );
            settings.signal?.addEventListener("abort", () => call.cancel(), { once: true });
          });
  }
  return wrapped as PromiseClient<S>;
}

/** Errors come out as ApiError; leaving the loop early cancels the call. */
function responseStream(call: ClientReadableStream<unknown>): ResponseStream<unknown> {
  return {
    cancel: () => call.cancel(),
    async *[Symbol.asyncIterator]() {
      try {
        for await (const response of call) yield response;
      } catch (error) {
        throw error instanceof Error && "code" in error && "metadata" in error ? new ApiError(error as ServiceError) : error;
      } finally {
        call.cancel();
      }
    },
  };
}
