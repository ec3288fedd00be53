import path from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { Logger } from "../../platform/logger.js";
import { RenderError } from "../renderer.js";
import type { WorkerReply, WorkerRequest } from "./protocol.js";

type Request = WorkerRequest extends infer R ? (R extends { id: number } ? Omit<R, "id"> : never) : never;

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

const here = fileURLToPath(import.meta.url);
// Under the test runner this module is TypeScript source; its worker then needs tsx to load.
const workerFile = path.join(path.dirname(here), `worker${path.extname(here)}`);
const workerExecArgv = path.extname(here) === ".ts" ? ["--import", "tsx"] : [];

/** Render workers, each answering requests in the order they were sent. */
export class WorkerPool {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private failure: Error | undefined;

  private constructor(
    private readonly workers: Worker[],
    private readonly logger: Logger,
  ) {
    for (const worker of workers) {
      worker.on("message", (reply: WorkerReply) => this.settle(reply));
      worker.on("error", (error) => this.fail(error));
      worker.on("exit", (code) => this.fail(new Error(`render worker exited with ${code}`)));
    }
  }

  /** Starts `size` workers and resolves once each has loaded its models. */
  static async start(size: number, logger: Logger): Promise<WorkerPool> {
    const workers = Array.from({ length: size }, () => new Worker(workerFile, { execArgv: workerExecArgv }));
    try {
      await Promise.all(
        workers.map(
          (worker) =>
            new Promise<void>((resolve, reject) => {
              worker.once("message", () => resolve());
              worker.once("error", reject);
              worker.once("exit", (code) => reject(new Error(`render worker exited with ${code} while loading`)));
            }),
        ),
      );
    } catch (error) {
      await Promise.all(workers.map((worker) => worker.terminate()));
      throw error;
    }
    return new WorkerPool(workers, logger);
  }

  get size(): number {
    return this.workers.length;
  }

  /** Set once a worker has died; the pool is then unusable and is replaced. */
  get broken(): boolean {
    return this.failure !== undefined;
  }

  call<T>(worker: number, request: Request, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.failure) return Promise.reject(new RenderError("render_failed", this.failure.message));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.workers[worker % this.workers.length]!.postMessage({ ...request, id }, transfer);
    });
  }

  /** The same request to every worker. */
  broadcast(request: Request): Promise<unknown[]> {
    return Promise.all(this.workers.map((_, i) => this.call(i, request)));
  }

  async close(): Promise<void> {
    this.fail(new Error("render workers closed"), false);
    await Promise.all(this.workers.map((worker) => worker.terminate()));
  }

  private settle(reply: WorkerReply): void {
    if (reply.type === "ready") return;
    const pending = this.pending.get(reply.id);
    if (!pending) return;
    this.pending.delete(reply.id);
    if (reply.type === "result") pending.resolve(reply.value);
    else pending.reject(new RenderError("render_failed", reply.message));
  }

  private fail(error: Error, unexpected = true): void {
    if (this.failure) return;
    this.failure = error;
    if (unexpected) this.logger.error({ err: error }, "render worker failed");
    for (const pending of this.pending.values()) pending.reject(new RenderError("render_failed", error.message));
    this.pending.clear();
  }
}
