import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Lifecycle, type Part } from "../src/platform/lifecycle.js";

/** Parts that write what happens to them into one journal; `fails` names the steps that throw. */
function parts(journal: string[], fails: string[] = []) {
  const step = async (name: string) => {
    await sleep(5);
    if (fails.includes(name)) throw new Error(`${name} failed`);
    journal.push(name);
  };
  return (name: string): Part => ({ start: () => step(`start ${name}`), stop: () => step(`stop ${name}`) });
}

describe("Lifecycle", () => {
  it("starts parts in order, one after another, and stops them in reverse", async () => {
    const journal: string[] = [];
    const part = parts(journal);
    const life = new Lifecycle();
    await life.open(async () => {
      await life.start(part("db"), part("workers"));
      await life.start(part("servers"));
    });
    await life.stop();
    expect(journal).toEqual(["start db", "start workers", "start servers", "stop servers", "stop workers", "stop db"]);
  });

  it("counts a part without start() as running, and stops it in its place", async () => {
    const journal: string[] = [];
    const part = parts(journal);
    const life = new Lifecycle();
    await life.start({ stop: () => journal.push("close db") }, part("workers"));
    await life.stop();
    expect(journal).toEqual(["start workers", "stop workers", "close db"]);
  });

  it("when a start fails, stops what had started, latest first, and rethrows", async () => {
    const journal: string[] = [];
    const part = parts(journal, ["start servers"]);
    const life = new Lifecycle();
    const opening = life.open(() => life.start(part("db"), part("workers"), part("servers"), part("never")));
    await expect(opening).rejects.toThrow("start servers failed");
    expect(journal).toEqual(["start db", "start workers", "stop workers", "stop db"]);
  });

  it("when wiring between starts fails, stops what had started", async () => {
    const journal: string[] = [];
    const part = parts(journal);
    const life = new Lifecycle();
    const opening = life.open(async () => {
      await life.start(part("db"));
      throw new Error("no blob store");
    });
    await expect(opening).rejects.toThrow("no blob store");
    expect(journal).toEqual(["start db", "stop db"]);
  });

  it("stops every part even when one fails to stop, then reports the first failure", async () => {
    const journal: string[] = [];
    const part = parts(journal, ["stop workers", "stop queue"]);
    const life = new Lifecycle();
    await life.start(part("db"), part("queue"), part("workers"), part("servers"));
    await expect(life.stop()).rejects.toThrow("stop workers failed");
    expect(journal).toEqual(["start db", "start queue", "start workers", "start servers", "stop servers", "stop db"]);
  });

  it("stops once, however often stop() is called", async () => {
    const journal: string[] = [];
    const part = parts(journal);
    const life = new Lifecycle();
    await life.start(part("db"));
    await Promise.all([life.stop(), life.stop()]);
    await life.stop();
    expect(journal).toEqual(["start db", "stop db"]);
  });
});
