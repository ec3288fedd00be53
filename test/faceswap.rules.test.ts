import { describe, expect, it } from "vitest";
import { quoteCredits } from "../src/faceswap/rules.js";

describe("quoteCredits", () => {
  it.each([
    [0, 15, 25, 450],
    [0, 15, 30, 450],
    [0, 2, 60, 120],
    [0, 1, 1000, 1000],
    [0, 0.3, 25, 9],
    [1, 1.000000001, 25, 1],
  ])("%s to %s s at %s fps reserves %s: 30 a second, or the frames when the source runs faster", (start, end, fps, credits) => {
    expect(quoteCredits(start, end, fps)).toBe(credits);
  });
});
