import { fromBinary, ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { invalidArgument, Violations } from "../platform/errors.js";
import { passesWireScan } from "./wire-scan.js";

/**
 * How deep messages may nest in a request (a JSON object inside a Struct counts as one level). Deep
 * enough for any request the API defines; a stranger's 10,000-deep Struct stops here instead of
 * exhausting the stack of every later step.
 */
export const MAX_REQUEST_DEPTH = 100;

/** Earliest and latest instants a google.protobuf.Timestamp may hold (0001-01-01, 9999-12-31). */
const MIN_TIMESTAMP_SECONDS = -62_135_596_800n;
const MAX_TIMESTAMP_SECONDS = 253_402_300_799n;
const MAX_TIMESTAMP_MS = 253_402_300_799_999;
const MAX_NANOS = 999_999_999;
const MAX_DURATION_SECONDS = 315_576_000_000n;

/** Text fields may hold tabs and line breaks, never other control characters (PostgreSQL refuses NUL). */
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const CONTROL_IN_TEXT = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;
/** Free-form data (Struct values) may hold anything JSON can except NUL, which jsonb cannot store. */
// eslint-disable-next-line no-control-regex -- finding NUL is the point
const CONTROL_IN_DATA = /\u0000/;

const WRAPPERS = new Set(
  ["String", "Bytes", "Bool", "Int32", "UInt32", "Int64", "UInt64", "Float", "Double"].map((t) => `google.protobuf.${t}Value`),
);
const INT64_TYPES = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Decodes a request from its wire bytes, whichever transport carried it, and checks what no handler
 * should have to: that it is well-formed protobuf, nests at most MAX_REQUEST_DEPTH deep, holds no
 * control characters in text, no map key `__proto__`, no 64-bit integer a JavaScript number cannot
 * hold exactly, and only timestamps and durations inside their documented ranges. Every problem is an
 * INVALID_ARGUMENT naming the field; only then does ts-proto's decoder (which throws on the integers)
 * build the handler's object.
 */
export function decodeRequest(input: DescMessage, bytes: Uint8Array, deserialize: (bytes: Buffer) => unknown): unknown {
  // Most requests are proved clean by a walk of their bytes; building a reflective message to check costs more than the call's own work.
  if (!passesWireScan(input, bytes)) checkRequest(input, bytes);
  try {
    return deserialize(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  } catch (error) {
    throw invalidArgument([{ field: "request", description: `could not be decoded (${describe(error)})` }], "MALFORMED_REQUEST");
  }
}

/** The full check: throws INVALID_ARGUMENT naming every field that breaks a rule (see decodeRequest). */
export function checkRequest(input: DescMessage, bytes: Uint8Array): void {
  let message;
  try {
    message = fromBinary(input, bytes);
  } catch (error) {
    const why = error instanceof RangeError && /call stack/i.test(error.message) ? "nests too deep" : describe(error);
    throw invalidArgument([{ field: "request", description: `is not a valid ${input.typeName} message (${why})` }], "MALFORMED_REQUEST");
  }
  const violations = new Violations();
  checkMessage(reflect(input, message), "", 1, violations);
  violations.throwIfAny();
}

function describe(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 200);
}

function checkMessage(message: ReflectMessage, path: string, depth: number, violations: Violations): void {
  const { desc } = message;
  if (desc.typeName === "google.protobuf.Timestamp") {
    checkTimestamp(message, path || "request", violations);
    return;
  }
  if (desc.typeName === "google.protobuf.Duration") {
    checkDuration(message, path || "request", violations);
    return;
  }
  // Value and ListValue are the JSON inside a Struct: their nesting is counted by the Structs.
  const nests = desc.typeName !== "google.protobuf.Value" && desc.typeName !== "google.protobuf.ListValue";
  if (nests && depth > MAX_REQUEST_DEPTH) {
    violations.add(path || "request", `nests deeper than ${MAX_REQUEST_DEPTH} levels`);
    return;
  }
  const data = desc.typeName.startsWith("google.protobuf.") && ["Struct", "Value", "ListValue"].includes(desc.name);
  const next = nests ? depth + 1 : depth;
  for (const field of desc.fields) {
    if (!message.isSet(field)) continue;
    // A wrapper's `value` is the field itself to the caller (`namespace.name`, not `namespace.name.value`).
    const at = data || WRAPPERS.has(desc.typeName) ? path : fieldPath(path, field);
    switch (field.fieldKind) {
      case "scalar":
        checkScalar(field.scalar, message.get(field), at, data, violations);
        break;
      case "enum":
        break;
      case "message":
        checkMessage(message.get(field), at, next, violations);
        break;
      case "list": {
        const list = message.get(field);
        let i = 0;
        for (const item of list) {
          const itemPath = `${at}[${i++}]`;
          if (field.listKind === "message") checkMessage(item as ReflectMessage, itemPath, next, violations);
          else if (field.listKind === "scalar") checkScalar(field.scalar, item, itemPath, data, violations);
        }
        break;
      }
      case "map":
        for (const [key, value] of message.get(field)) {
          const entryPath = `${at}[${quoted(String(key))}]`;
          const control = data ? CONTROL_IN_DATA : CONTROL_IN_TEXT;
          if (typeof key === "string" && control.test(key)) violations.add(entryPath, `key ${controlProblem(key, control)}`);
          // ts-proto's decoder (and every handler's object) would take it for the object's prototype and drop it.
          if (key === "__proto__") violations.add(entryPath, "key is reserved: JavaScript objects cannot hold it as data");
          if (field.mapKind === "message") checkMessage(value as ReflectMessage, entryPath, next, violations);
          else if (field.mapKind === "scalar") checkScalar(field.scalar, value, entryPath, data, violations);
        }
        break;
    }
  }
}

/** Proto names joined by dots (inside a Struct the map entries add JSON keys and indexes instead: `data["a"][2]`). */
function fieldPath(path: string, field: DescField): string {
  return path ? `${path}.${field.name}` : field.name;
}

function checkScalar(scalar: ScalarType, value: unknown, path: string, data: boolean, violations: Violations): void {
  if (scalar === ScalarType.STRING && typeof value === "string") {
    const control = data ? CONTROL_IN_DATA : CONTROL_IN_TEXT;
    if (control.test(value)) violations.add(path, controlProblem(value, control));
  } else if (INT64_TYPES.has(scalar) && (typeof value === "bigint" || typeof value === "string")) {
    const n = BigInt(value);
    if (n > MAX_SAFE || n < -MAX_SAFE) {
      violations.add(path, `must be between ${-Number.MAX_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER}`);
    }
  }
}

function controlProblem(text: string, control: RegExp): string {
  const at = text.search(control);
  const code = text.charCodeAt(at).toString(16).toUpperCase().padStart(4, "0");
  return `must not contain control characters (U+${code} at position ${at})`;
}

function checkTimestamp(message: ReflectMessage, path: string, violations: Violations): void {
  const seconds = BigInt(message.get(message.desc.field.seconds!) as bigint);
  const nanos = message.get(message.desc.field.nanos!) as number;
  if (seconds < MIN_TIMESTAMP_SECONDS || seconds > MAX_TIMESTAMP_SECONDS) {
    violations.add(`${path}.seconds`, "must be within 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z");
  } else if (nanos < 0 || nanos > MAX_NANOS) {
    violations.add(`${path}.nanos`, `must be between 0 and ${MAX_NANOS}`);
  } else if (Number(seconds) * 1000 + nanos / 1e6 > MAX_TIMESTAMP_MS) {
    // The handlers' Dates are milliseconds in a double: the last nanoseconds of the year 9999 round
    // up into 10000, which no timestamp can be written back as (the key was made, its answer a 500).
    violations.add(`${path}.nanos`, "rounds past 9999-12-31T23:59:59.999Z; give at most 999 milliseconds");
  }
}

/** google.protobuf.Duration's own rules: about ±10,000 years, nanos within a second and of the seconds' sign. */
function checkDuration(message: ReflectMessage, path: string, violations: Violations): void {
  const seconds = BigInt(message.get(message.desc.field.seconds!) as bigint);
  const nanos = message.get(message.desc.field.nanos!) as number;
  if (seconds < -MAX_DURATION_SECONDS || seconds > MAX_DURATION_SECONDS) {
    violations.add(`${path}.seconds`, `must be between ${-MAX_DURATION_SECONDS} and ${MAX_DURATION_SECONDS}`);
  }
  if (nanos < -MAX_NANOS || nanos > MAX_NANOS) violations.add(`${path}.nanos`, `must be between ${-MAX_NANOS} and ${MAX_NANOS}`);
  else if ((seconds > 0n && nanos < 0) || (seconds < 0n && nanos > 0)) violations.add(`${path}.nanos`, "must have the sign of seconds");
}

/** A map key as it appears in a field path (or a value in a message), cut short when long. */
export function quoted(key: string): string {
  return JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key);
}
