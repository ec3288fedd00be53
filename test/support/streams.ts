import { expect } from "vitest";
import { ApiError, type ResponseStream } from "../../src/client/index.js";

/** Reads a server stream one message at a time; `end` waits for it to fail and returns the error. */
export function streamReader<T>(stream: ResponseStream<T>) {
  const iterator = stream[Symbol.asyncIterator]();
  return {
    async next(timeoutMs = 5_000): Promise<T> {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no message within ${timeoutMs} ms`)), timeoutMs);
      });
      try {
        const result = await Promise.race([iterator.next(), timeout]);
        if (result.done) throw new Error("the stream ended");
        return result.value;
      } finally {
        clearTimeout(timer);
      }
    },
    async end(): Promise<ApiError> {
      try {
        for (;;) if ((await iterator.next()).done) throw new Error("the stream ended OK");
      } catch (error) {
        expect(error).toBeInstanceOf(ApiError);
        return error as ApiError;
      }
    },
    cancel: () => stream.cancel(),
  };
}

/** A gauge's value in the app's /metrics. */
export async function gauge(t: { http: (method: string, path: string, options: { token: string }) => Promise<{ body: unknown }> }, name: string, token: string): Promise<number> {
  const { body } = await t.http("GET", "/metrics", { token });
  return Number(new RegExp(`^${name} (\\d+)$`, "m").exec(body as string)?.[1]);
}
