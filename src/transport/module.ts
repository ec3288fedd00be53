import type { Authenticator, KeyChanges } from "../platform/auth.js";
import type { Part } from "../platform/lifecycle.js";
import type { Platform } from "../platform/module.js";
import type { ServiceImplementation } from "./call.js";
import { startGrpcServer, type GrpcServer } from "./grpc/server.js";
import { metricsRoute } from "./http/metrics-route.js";
import { startHttpServer, type HttpRoute, type HttpServer } from "./http/server.js";
import { Transcoder } from "./http/transcoder.js";
import { Router } from "./router.js";

/** What a capability's module hands the servers, besides its own start and stop. */
export interface Capability extends Part {
  /** Its RPC services, served over gRPC and, transcoded, over HTTP. */
  services: ServiceImplementation[];
  /** Plain HTTP routes (pages, blob transfers), tried before the transcoded API. */
  routes?: HttpRoute[];
}

/** The servers; the ports are the configured ones until start() has bound them. */
export interface Transport extends Part {
  readonly grpcPort: number;
  readonly httpPort: number;
}

export interface TransportOptions {
  platform: Platform;
  authenticate: Authenticator;
  /** API keys revoked or changed, for the streams they opened. */
  keyChanges: KeyChanges;
  /** In the order their services and routes are tried. */
  capabilities: Capability[];
}

/**
 * One Router over every capability's services, served by the gRPC and the HTTP server. stop() is
 * the first step of a shutdown: health turns NOT_SERVING, then both servers drain.
 */
export function transportModule({ platform, authenticate, keyChanges, capabilities }: TransportOptions): Transport {
  const { config, logger, metrics } = platform;
  const router = new Router({ services: capabilities.flatMap((c) => c.services), authenticate, keyChanges, logger, metrics });
  const transcoder = new Transcoder(router);
  const routes = [metricsRoute(metrics, authenticate, config.metricsPublic), ...capabilities.flatMap((c) => c.routes ?? [])];
  let servers: { grpc: GrpcServer; http: HttpServer } | undefined;
  let serving = false;
  return {
    get grpcPort() {
      return servers?.grpc.port ?? config.grpcPort;
    },
    get httpPort() {
      return servers?.http.port ?? config.httpPort;
    },
    async start() {
      const grpc = await startGrpcServer(router, config.host, config.grpcPort);
      try {
        const http = await startHttpServer({
          transcoder,
          routes,
          host: config.host,
          port: config.httpPort,
          logger,
          isServing: () => serving,
        });
        servers = { grpc, http };
      } catch (error) {
        await grpc.shutdown(0);
        throw error;
      }
      serving = true;
    },
    async stop() {
      if (!servers) return;
      const { grpc, http } = servers;
      serving = false;
      grpc.setNotServing();
      logger.info({ event: "stopping" }, "draining");
      router.close();
      await Promise.all([grpc.shutdown(config.shutdownGraceMs), http.shutdown(config.shutdownGraceMs)]);
    },
  };
}
