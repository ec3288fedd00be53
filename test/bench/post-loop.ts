import { parentPort, workerData } from "node:worker_threads";
import { Agent, request } from "undici";

/**
 * A worker thread of the webhook bench: the raw ceiling of the bench's receiver, POSTing the same
 * body and headers a delivery carries with undici.request, `concurrency` requests at a time, on
 * its own event loop (so the receiver's thread does only the receiving, as in a delivery run).
 */
interface PostLoopData {
  url: string;
  body: string;
  headers: Record<string, string>;
  concurrency: number;
  durationMs: number;
}

const { url, body, headers, concurrency, durationMs } = workerData as PostLoopData;
const dispatcher = new Agent({ connections: concurrency });
let requests = 0;
let errors = 0;
let firstError: string | undefined;
const end = Date.now() + durationMs;
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (Date.now() < end) {
      try {
        const response = await request(url, { method: "POST", headers, body, dispatcher });
        await response.body.dump();
        if (response.statusCode === 200) requests++;
        else errors++;
      } catch (error) {
        errors++;
        firstError ??= String(error);
      }
    }
  }),
);
await dispatcher.close();
parentPort!.postMessage({ requests, errors, firstError });
