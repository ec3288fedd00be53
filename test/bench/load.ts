/** A closed-loop load generator: `concurrency` workers call `call` back to back for `durationMs`. */
export interface LoadResult {
  name: string;
  requests: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Server CPU per completed call, in microseconds, when a CPU meter was given. */
  serverCpuUs?: number;
  firstError?: string;
}

export async function runLoad(
  name: string,
  call: (i: number) => Promise<unknown>,
  {
    concurrency,
    durationMs,
    warmupMs = 1_000,
    cpuMs,
  }: { concurrency: number; durationMs: number; warmupMs?: number; cpuMs?: () => number },
): Promise<LoadResult> {
  let counter = 0;
  const warmupEnd = Date.now() + warmupMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < warmupEnd) await call(counter++).catch(() => undefined);
    }),
  );

  const latencies: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  const cpuBefore = cpuMs?.();
  const end = Date.now() + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) {
        const t0 = performance.now();
        try {
          await call(counter++);
          latencies.push(performance.now() - t0);
        } catch (error) {
          errors++;
          firstError ??= String(error);
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpuAfter = cpuMs?.();
  latencies.sort((a, b) => a - b);
  return {
    name,
    requests: latencies.length,
    errors,
    seconds,
    perSecond: latencies.length / seconds,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
    serverCpuUs:
      cpuBefore !== undefined && cpuAfter !== undefined ? ((cpuAfter - cpuBefore) * 1000) / Math.max(1, latencies.length) : undefined,
    firstError,
  };
}

/** The value at quantile `q` (0..1) of ascending `sorted`; NaN when it is empty. */
export function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}
