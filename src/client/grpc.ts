import {
  credentials as grpcCredentials,
  makeGenericClientConstructor,
  Metadata,
  type CallOptions,
  type Client,
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

/** A service's methods as promises; requests may leave fields out (they take their defaults). */
export type PromiseClient<S extends ServiceDefinition> = {
  [K in keyof S]: S[K] extends MethodDefinition<infer Req, infer Res>
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

export interface ConnectOptions {
  /** host:port of the gRPC server. */
  address: string;
  /** An API key, sent as `authorization: Bearer <token>`. */
  token?: string;
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
  const client = new Constructor(options.address, grpcCredentials.createInsecure(), options.channelOptions) as Client &
    Record<string, UnaryMethod>;
  const service = registry.getService(serviceName);

  const wrapped: Record<string, unknown> = { close: () => client.close() };
  for (const [key, method] of Object.entries(definition)) {
    const inputName = service?.methods.find((m) => `/${serviceName}/${m.name}` === method.path)?.input.name;
    const codec = inputName ? (messages[inputName] as { fromPartial?: (v: unknown) => unknown }) : undefined;
    wrapped[key] = (request: unknown = {}, settings: CallSettings = {}) =>
      new Promise((resolve, reject) => {
        const metadata = new Metadata();
        if (options.token) metadata.set("authorization", `Bearer ${options.token}`);
        for (const [name, value] of Object.entries(settings.metadata ?? {})) metadata.set(name, value);
        const callOptions: Partial<CallOptions> = {};
        if (settings.timeoutMs !== undefined) callOptions.deadline = Date.now() + settings.timeoutMs;
        const call = client[key]!.call(
          client,
          codec?.fromPartial ? codec.fromPartial(request) : request,
          metadata,
          callOptions,
          (error, response) => (error ? reject(new ApiError(error)) : resolve(response)),
        );
        settings.signal?.addEventListener("abort", () => call.cancel(), { once: true });
      });
  }
  return wrapped as PromiseClient<S>;
}
