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

export interface LoadOptions {
  concurrency: number;
  durationMs: number;
  warmupMs?: number;
  /** The server's CPU time so far, in milliseconds. */
  cpuMs?: () => number;
}

/** One scenario of a run. */
export interface Scenario {
  name: string;
  call: (i: number) => Promise<unknown>;
}

export async function runLoad(name: string, call: (i: number) => Promise<unknown>, options: LoadOptions): Promise<LoadResult> {
  const [result] = await runInterleaved([{ name, call }], { ...options, slices: 1 });
  return result!;
}

/** What one scenario gathered over its slices. */
interface Tally {
  latencies: number[];
  errors: number;
  firstError?: string;
  ms: number;
  cpuMs: number;
}

/**
 * Runs the scenarios in turns of durationMs / slices each, `slices` times round, for durationMs of
 * each in all. On a machine shared with other work, load that comes and goes then falls on every
 * scenario alike, rather than on whichever ran at the time: a ratio between scenarios (a call to
 * the no-op's) moved by ±0.1 between runs of the same code when each ran for one stretch.
 */
export async function runInterleaved(
  scenarios: Scenario[],
  { concurrency, durationMs, warmupMs = 1_000, cpuMs, slices }: LoadOptions & { slices: number },
): Promise<LoadResult[]> {
  let counter = 0;
  const loop = async (call: Scenario["call"], ms: number, tally?: Tally) => {
    const started = performance.now();
    const cpuBefore = cpuMs?.() ?? 0;
    const end = Date.now() + ms;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (Date.now() < end) {
          const t0 = performance.now();
          try {
            await call(counter++);
            tally?.latencies.push(performance.now() - t0);
          } catch (error) {
            if (!tally) continue;
            tally.errors++;
            tally.firstError ??= String(error);
          }
        }
      }),
    );
    if (!tally) return;
    tally.ms += performance.now() - started;
    tally.cpuMs += (cpuMs?.() ?? 0) - cpuBefore;
  };
  for (const { call } of scenarios) await loop(call, warmupMs);
  const tallies = scenarios.map((): Tally => ({ latencies: [], errors: 0, ms: 0, cpuMs: 0 }));
  for (let round = 0; round < slices; round++) {
    for (const [i, { call }] of scenarios.entries()) await loop(call, durationMs / slices, tallies[i]);
  }
  return scenarios.map(({ name }, i) => {
    const { latencies, errors, firstError, ms, cpuMs: cpu } = tallies[i]!;
    latencies.sort((a, b) => a - b);
    const seconds = ms / 1000;
    return {
      name,
      requests: latencies.length,
      errors,
      seconds,
      perSecond: latencies.length / seconds,
      p50Ms: quantile(latencies, 0.5),
      p99Ms: quantile(latencies, 0.99),
      serverCpuUs: cpuMs ? (cpu * 1000) / Math.max(1, latencies.length) : undefined,
      firstError,
    };
  });
}

/** The value at quantile `q` (0..1) of ascending `sorted`; NaN when it is empty. */
export function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}
