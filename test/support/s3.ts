import fs from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { vi } from "vitest";

/** The part of s3rver (a pure-JS S3 server, shipped without types) the tests use. */
interface S3rver {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverOptions = { address: string; port: number; directory: string; silent: boolean; configureBuckets: { name: string }[] };
const S3rver = createRequire(import.meta.url)("s3rver") as new (options: S3rverOptions) => S3rver;

export interface S3Server {
  endpoint: string;
  stop(): Promise<void>;
}

/**
 * A real S3-compatible server on loopback with `bucket` created, and its built-in account's
 * credentials in the environment, where the AWS SDK's default chain finds them.
 */
export async function startS3Server(bucket: string): Promise<S3Server> {
  const directory = await fs.mkdtemp(path.join(os.tmpdir(), "s3rver-"));
  const server = new S3rver({ address: "127.0.0.1", port: 0, directory, silent: true, configureBuckets: [{ name: bucket }] });
  const { port } = await server.run();
  vi.stubEnv("AWS_ACCESS_KEY_ID", "S3RVER");
  vi.stubEnv("AWS_SECRET_ACCESS_KEY", "S3RVER");
  return {
    endpoint: `http://127.0.0.1:${port}`,
    stop: async () => {
      await server.close();
      vi.unstubAllEnvs();
      await fs.rm(directory, { recursive: true, force: true });
    },
  };
}
