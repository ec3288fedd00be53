import type { Violations } from "./errors.js";

// Every list pages in its service, through one of these two: offset/limit for the APIs whose wire
// form has offset and limit, an opaque page token (keyset paging) for those with page_size and
// page_token. Both follow AIP-158: a size of 0 means the default, and a larger one is coerced to
// the maximum.

export interface PageLimits {
  defaultSize: number;
  maxSize: number;
}

/** offset/limit paging. */
export function pageOf(request: { offset: number; limit: number }, { defaultSize, maxSize }: PageLimits): { offset: number; limit: number } {
  const limit = request.limit === 0 ? defaultSize : Math.min(request.limit, maxSize);
  return { offset: request.offset, limit };
}

/**
 * Keyset paging: `after` is the sort key of the previous page's last row, carried by the page
 * token; `parseKey` turns what a token holds back into a key, or undefined when it is not one.
 * Bad fields are added to `violations`.
 */
export function keysetPage<Key>(
  violations: Violations,
  request: { pageSize: number; pageToken: string },
  { defaultSize, maxSize }: PageLimits,
  parseKey: (value: unknown) => Key | undefined,
): { limit: number; after: Key | undefined } {
  if (request.pageSize < 0) violations.add("page_size", "must not be negative");
  let after: Key | undefined;
  if (request.pageToken !== "") {
    after = parseKey(decodePageToken(request.pageToken));
    if (after === undefined) violations.add("page_token", "is not a token from a previous response");
  }
  return { limit: Math.min(request.pageSize || defaultSize, maxSize), after };
}

/**
 * One page of `rows`, which the query fetched with a limit of `limit + 1` so that an extra row
 * tells that another page follows; the token continues after the page's last row.
 */
export function keysetResult<Row>(rows: Row[], limit: number, keyOf: (row: Row) => unknown): { rows: Row[]; nextPageToken: string } {
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return { rows: page, nextPageToken: rows.length > limit && last !== undefined ? encodePageToken(keyOf(last)) : "" };
}

function encodePageToken(key: unknown): string {
  return Buffer.from(JSON.stringify(key)).toString("base64url");
}

/** What the token holds, or undefined when it is not one of ours. */
function decodePageToken(token: string): unknown {
  try {
    return JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
}
