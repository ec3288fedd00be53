import { afterAll, beforeAll } from "vitest";
import { startApp, type App } from "../../src/app.js";
import { createClient, type AtriumClient } from "../../src/client/index.js";
import { loadConfig, type Config } from "../../src/config.js";
import { createTestDatabase } from "./database.js";
import { recordingLogger } from "./logs.js";

export const ADMIN_TOKEN = "test-admin-token-0123456789";

export interface TestApp {
  app: App;
  config: Config;
  /** Every log line the app wrote, parsed. */
  logs: Record<string, unknown>[];
  grpcAddress: string;
  httpUrl: string;
  /** Clients authenticated with the admin key. */
  admin: AtriumClient;
  client(token?: string): AtriumClient;
  /** An HTTP request to the app; JSON bodies are encoded, responses parsed. */
  http(method: string, path: string, options?: HttpOptions): Promise<HttpResult>;
  stop(): Promise<void>;
}

export interface HttpOptions {
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface HttpResult {
  status: number;
  headers: Headers;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

/** Starts the whole service in-process on free ports against `databaseUrl`. */
export async function startTestApp(databaseUrl: string, env: Record<string, string> = {}): Promise<TestApp> {
  const config = loadConfig({
    GRPC_PORT: "0",
    HTTP_PORT: "0",
    HOST: "127.0.0.1",
    DATABASE_URL: databaseUrl,
    ADMIN_TOKEN,
    LOG_LEVEL: "info",
    DATABASE_POOL_SIZE: "5",
    SHUTDOWN_GRACE_MS: "2000",
    // Test receivers listen on loopback.
    WEBHOOK_ALLOW_PRIVATE: "true",
    // Most test files never render: the models load with the first job instead.
    RENDER_PRELOAD: "false",
    ...env,
  });
  const { logger, logs } = recordingLogger(config.logLevel);
  const app = await startApp(config, logger);
  const grpcAddress = `127.0.0.1:${app.grpcPort}`;
  const httpUrl = `http://127.0.0.1:${app.httpPort}`;
  const clients: AtriumClient[] = [];
  const client = (token?: string) => {
    const c = createClient({ address: grpcAddress, token });
    clients.push(c);
    return c;
  };
  return {
    app,
    config,
    logs,
    grpcAddress,
    httpUrl,
    admin: client(ADMIN_TOKEN),
    client,
    http: async (method, path, options = {}) => {
      const headers: Record<string, string> = { ...options.headers };
      if (options.token) headers.authorization = `Bearer ${options.token}`;
      let body: string | undefined;
      if (options.body !== undefined) {
        body = typeof options.body === "string" ? options.body : JSON.stringify(options.body);
        headers["content-type"] ??= "application/json";
      }
      const response = await fetch(httpUrl + path, { method, headers, body });
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // not JSON: keep the text
      }
      return { status: response.status, headers: response.headers, body: parsed };
    },
    stop: async () => {
      for (const c of clients) c.close();
      await app.stop();
    },
  };
}

/** Two replicas of the service on one database, as in a scaled-out deployment. */
export interface Replicas {
  a: TestApp;
  b: TestApp;
  databaseUrl: string;
}

/**
 * Starts two replicas on a new database before the file's tests and stops them after. `use` gets
 * them once started, and again after `restart` replaces one with a new replica on the same database.
 */
export function useTwoReplicas(env: Record<string, string>, use: (replicas: Replicas) => void): { restart(which: "a" | "b"): Promise<void> } {
  const replicas = {} as Replicas;
  beforeAll(async () => {
    replicas.databaseUrl = await createTestDatabase();
    replicas.a = await startTestApp(replicas.databaseUrl, env);
    replicas.b = await startTestApp(replicas.databaseUrl, env);
    use(replicas);
  });
  afterAll(async () => {
    await Promise.all([replicas.a?.stop(), replicas.b?.stop()]);
  });
  return {
    async restart(which) {
      await replicas[which].stop();
      replicas[which] = await startTestApp(replicas.databaseUrl, env);
      use(replicas);
    },
  };
}
