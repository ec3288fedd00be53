import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isUuid, rfc3339, uuidv7, uuidv7Floor } from "../src/platform/ids.js";

describe("rfc3339", () => {
  it("is toISOString without the milliseconds, for every date a Timestamp can hold and past it", () => {
    const dates = fc.date({ min: new Date(-62_135_596_800_000 - 86_400_000), max: new Date(8.64e15), noInvalidDate: true });
    fc.assert(
      fc.property(dates, (date) => {
        expect(rfc3339(date)).toBe(date.toISOString().replace(/\.\d{3}Z$/, "Z"));
      }),
      { numRuns: 5_000 },
    );
    expect(rfc3339(new Date("0001-01-01T00:00:00.999Z"))).toBe("0001-01-01T00:00:00Z");
    expect(rfc3339(new Date("2026-02-03T04:05:06.789Z"))).toBe("2026-02-03T04:05:06Z");
  });
});

describe("uuidv7", () => {
  it("makes version 7 UUIDs that sort by creation time", async () => {
    const first = uuidv7();
    await new Promise((resolve) => setTimeout(resolve, 2));
    const second = uuidv7();
    expect(isUuid(first) && isUuid(second)).toBe(true);
    expect(first[14]).toBe("7");
    expect(first < second).toBe(true);
  });
});

describe("uuidv7Floor", () => {
  it("sorts above every version 7 id of the millisecond before and not above any of its own millisecond", () => {
    const ms = Date.UTC(2026, 10, 23, 17, 0, 0, 123);
    const floor = uuidv7Floor(new Date(ms));
    // A version 7 id of `at`: its 48-bit time, the version, then random bits with the variant.
    const made = (at: number, random: string) => {
      const hex = `${at.toString(16).padStart(12, "0")}7${random}`;
      return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
    };
    fc.assert(
      fc.property(fc.stringMatching(/^[0-9a-f]{3}[89ab][0-9a-f]{15}$/), (random) => {
        expect(made(ms - 1, random) < floor).toBe(true);
        expect(made(ms, random) >= floor).toBe(true);
      }),
    );
    expect(floor).toBe(made(ms, "0008000000000000000"));
    expect(isUuid(floor)).toBe(true);
  });
});
