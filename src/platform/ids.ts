const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids of rows are UUIDs; checking first turns a malformed id into NOT_FOUND or a field error, not a SQL error. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/** RFC 3339 UTC with second precision, e.g. `2026-11-20T23:05:48Z`. */
export function rfc3339(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}
