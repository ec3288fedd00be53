import { describe, expect, it } from "vitest";
import { RpcError, Violations } from "../src/platform/errors.js";
import { keysetPage, keysetResult, pageOf } from "../src/platform/paging.js";

const LIMITS = { defaultSize: 20, maxSize: 100 };
const isKey = (value: unknown) => (Array.isArray(value) && typeof value[0] === "number" ? (value as [number, string]) : undefined);

function fieldsOf(violations: Violations): string[] {
  try {
    violations.throwIfAny();
    return [];
  } catch (error) {
    return (error as RpcError).fieldViolations.map((v) => v.field);
  }
}

describe("pageOf", () => {
  it("takes 0 as the default, coerces a larger limit to the maximum, and keeps the offset", () => {
    expect(pageOf({ offset: 7, limit: 0 }, LIMITS)).toEqual({ offset: 7, limit: 20 });
    expect(pageOf({ offset: 0, limit: 5 }, LIMITS)).toEqual({ offset: 0, limit: 5 });
    expect(pageOf({ offset: 0, limit: 500 }, LIMITS)).toEqual({ offset: 0, limit: 100 });
  });
});

describe("keysetPage and keysetResult", () => {
  const rows = Array.from({ length: 5 }, (_, i) => ({ n: i, id: `row-${i}` }));
  const keyOf = (row: { n: number; id: string }) => [row.n, row.id];

  it("pages through a list, each token continuing after the last row of its page", () => {
    const seen: string[] = [];
    let token = "";
    for (let pages = 0; pages < 10; pages++) {
      const violations = new Violations();
      const { limit, after } = keysetPage(violations, { pageSize: 2, pageToken: token }, LIMITS, isKey);
      expect(fieldsOf(violations)).toEqual([]);
      const rest = after === undefined ? rows : rows.filter((row) => row.n > after[0]);
      const page = keysetResult(rest.slice(0, limit + 1), limit, keyOf);
      seen.push(...page.rows.map((row) => row.id));
      token = page.nextPageToken;
      if (token === "") break;
    }
    expect(seen).toEqual(rows.map((row) => row.id));
  });

  it("gives no token when the rows fit the page", () => {
    expect(keysetResult(rows, 5, keyOf).nextPageToken).toBe("");
    expect(keysetResult([], 5, keyOf)).toEqual({ rows: [], nextPageToken: "" });
  });

  it("takes 0 as the default size and coerces a larger one to the maximum", () => {
    expect(keysetPage(new Violations(), { pageSize: 0, pageToken: "" }, LIMITS, isKey)).toEqual({ limit: 20, after: undefined });
    expect(keysetPage(new Violations(), { pageSize: 1000, pageToken: "" }, LIMITS, isKey).limit).toBe(100);
  });

  it("names both bad fields at once: a negative size and a token that is not ours", () => {
    for (const pageToken of ["garbage", Buffer.from("{}").toString("base64url"), Buffer.from('"x"').toString("base64url")]) {
      const violations = new Violations();
      keysetPage(violations, { pageSize: -1, pageToken }, LIMITS, isKey);
      expect(fieldsOf(violations)).toEqual(["page_size", "page_token"]);
    }
  });
});
