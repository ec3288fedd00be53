import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { TickBatcher, type TickBatcherOptions } from "../src/platform/tick-batcher.js";

const nextTick = () => new Promise((resolve) => setImmediate(resolve));

/** A batcher over numbers whose write doubles them, records every batch and how many ran at once. */
function recording(options: Omit<TickBatcherOptions<number, number>, "write"> & { writeMs?: number; failOn?: number } = {}) {
  const batches: number[][] = [];
  let running = 0;
  let mostAtOnce = 0;
  const batcher = new TickBatcher<number, number>({
    ...options,
    write: async (items) => {
      batches.push(items);
      mostAtOnce = Math.max(mostAtOnce, ++running);
      try {
        if (options.writeMs) await sleep(options.writeMs);
        if (options.failOn !== undefined && items.includes(options.failOn)) throw new Error(`cannot write ${options.failOn}`);
        return items.map((n) => n * 2);
      } finally {
        running--;
      }
    },
  });
  return { batcher, batches, mostAtOnce: () => mostAtOnce };
}

describe("TickBatcher", () => {
  it("writes what arrives in one tick with one call, and answers each caller with its own result", async () => {
    const { batcher, batches } = recording();
    const results = await Promise.all([1, 2, 3].map((n) => batcher.add(n)));
    expect(results).toEqual([2, 4, 6]);
    expect(batches).toEqual([[1, 2, 3]]);
  });

  it("starts a new batch in a later tick", async () => {
    const { batcher, batches } = recording();
    const first = batcher.add(1);
    await first;
    await nextTick();
    await batcher.add(2);
    expect(batches).toEqual([[1], [2]]);
  });

  it("splits a tick's items into batches of at most maxBatch", async () => {
    const { batcher, batches, mostAtOnce } = recording({ maxBatch: 2, writeMs: 5 });
    expect(await Promise.all([1, 2, 3, 4, 5].map((n) => batcher.add(n)))).toEqual([2, 4, 6, 8, 10]);
    expect(batches).toEqual([[1, 2], [3, 4], [5]]);
    expect(mostAtOnce()).toBe(1);
  });

  it("without overlap, gathers what arrives during a write into one batch that starts when it ends", async () => {
    const { batcher, batches, mostAtOnce } = recording({ writeMs: 200 });
    const first = batcher.add(1);
    await sleep(10);
    const later = [batcher.add(2)];
    await sleep(10);
    later.push(batcher.add(3), batcher.add(4));
    expect(await Promise.all([first, ...later])).toEqual([2, 4, 6, 8]);
    expect(batches).toEqual([[1], [2, 3, 4]]);
    expect(mostAtOnce()).toBe(1);
  });

  it("with overlap, starts each tick's batch while earlier ones are still being written", async () => {
    const { batcher, batches, mostAtOnce } = recording({ writeMs: 200, overlap: true });
    const first = batcher.add(1);
    await sleep(10);
    const second = batcher.add(2);
    await sleep(10);
    const third = batcher.add(3);
    expect(await Promise.all([first, second, third])).toEqual([2, 4, 6]);
    expect(batches).toEqual([[1], [2], [3]]);
    expect(mostAtOnce()).toBe(3);
  });

  it("fails every caller of a failed batch, and only those", async () => {
    const { batcher } = recording({ failOn: 2 });
    const failed = [batcher.add(1), batcher.add(2)].map((p) => p.then(String, (e: Error) => e.message));
    expect(await Promise.all(failed)).toEqual(["cannot write 2", "cannot write 2"]);
    await nextTick();
    expect(await batcher.add(3)).toBe(6);
  });

  it("holds items while not ready, and writes them at the flush that follows", async () => {
    let ready = false;
    const { batcher, batches } = recording({ ready: () => ready });
    let answered = false;
    const held = Promise.all([batcher.add(1), batcher.add(2)]).then((r) => ((answered = true), r));
    await sleep(20);
    expect(batches).toEqual([]);
    expect(answered).toBe(false);
    await batcher.idle();
    ready = true;
    batcher.flush();
    expect(await held).toEqual([2, 4]);
    expect(batches).toEqual([[1, 2]]);
  });

  it("idle() waits for what is queued and what is being written", async () => {
    const { batcher } = recording({ writeMs: 20, maxBatch: 1 });
    const written: number[] = [];
    for (const n of [1, 2, 3]) void batcher.add(n).then((r) => written.push(r));
    await batcher.idle();
    expect(written).toEqual([2, 4, 6]);
  });

  it("idle() does not wait for what is added after it was called", async () => {
    const { batcher } = recording({ writeMs: 20 });
    const first = batcher.add(1);
    let streaming = true;
    const stream = (async () => {
      while (streaming) {
        void batcher.add(2);
        await sleep(5);
      }
    })();
    await batcher.idle();
    expect(await first).toBe(2);
    streaming = false;
    await stream;
    await batcher.idle();
  });
});
