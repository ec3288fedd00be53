import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isUuid, rfc3339, uuidv7 } from "../src/platform/ids.js";

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
