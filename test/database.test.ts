import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDb, parseTimestamptz, type Db } from "../src/platform/db/database.js";
import { createLogger } from "../src/platform/logger.js";
import { createTestDatabase } from "./support/database.js";

let db: Db;

beforeAll(async () => {
  db = createDb(await createTestDatabase(), 2, createLogger("silent"));
});
afterAll(async () => {
  await db?.destroy();
});

describe("timestamps", () => {
  it.each([
    ["2026-11-20 23:05:48.123456+00", "2026-11-20T23:05:48.123Z"],
    ["2026-11-20 23:05:48+00", "2026-11-20T23:05:48.000Z"],
    ["2026-11-20 23:05:48.5+00", "2026-11-20T23:05:48.500Z"],
    ["2026-11-20 23:05:48.123456+01", "2026-11-20T22:05:48.123Z"],
    ["2026-11-20 23:05:48+05:30", "2026-11-20T17:35:48.000Z"],
  ])("parses %s", (text, iso) => {
    expect(parseTimestamptz(text).toISOString()).toBe(iso);
  });

  it("keeps infinity", () => {
    expect(String(parseTimestamptz("infinity"))).toBe("Infinity");
  });

  it("reads what it writes, to the millisecond, whatever the server's time zone", async () => {
    const written = new Date("2031-02-03T04:05:06.789Z");
    const { rows } = await sql<{ t: Date; text: string }>`select ${written}::timestamptz as t, ${written}::timestamptz::text as text`.execute(db);
    expect(rows[0]!.t.toISOString()).toBe(written.toISOString());
    expect(rows[0]!.text).toBe("2031-02-03 04:05:06.789+00");
  });
});
