import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Wakeup } from "../src/platform/wakeup.js";

/** How long the promise took to settle, in ms. */
async function timed(work: Promise<void>): Promise<number> {
  const started = performance.now();
  await work;
  return performance.now() - started;
}

describe("Wakeup", () => {
  it("sleeps until the timer runs out when nobody wakes it", async () => {
    expect(await timed(new Wakeup().sleep(60))).toBeGreaterThanOrEqual(55);
  });

  it("wakes every sleeper at once", async () => {
    const wakeup = new Wakeup();
    const sleeps = [wakeup.sleep(5_000), wakeup.sleep(5_000), wakeup.sleep(5_000)].map(timed);
    await sleep(20);
    wakeup.wake();
    for (const ms of await Promise.all(sleeps)) expect(ms).toBeLessThan(1_000);
  });

  it("forgets a wake that came before the sleep, unless the sleep names an earlier mark", async () => {
    const wakeup = new Wakeup();
    const mark = wakeup.mark();
    wakeup.wake();
    expect(await timed(wakeup.sleep(60))).toBeGreaterThanOrEqual(55);
    expect(await timed(wakeup.sleep(5_000, mark))).toBeLessThan(50);
    expect(await timed(wakeup.sleep(60, wakeup.mark()))).toBeGreaterThanOrEqual(55);
  });

  it("does not sleep for zero or less", async () => {
    const wakeup = new Wakeup();
    expect(await timed(wakeup.sleep(0))).toBeLessThan(50);
    expect(await timed(wakeup.sleep(-10))).toBeLessThan(50);
  });

  it("leaves no timer behind once woken", async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    const wakeup = new Wakeup();
    const before = timers();
    const slept = wakeup.sleep(60_000);
    expect(timers()).toBe(before + 1);
    wakeup.wake();
    await slept;
    expect(timers()).toBe(before);
  });
});
