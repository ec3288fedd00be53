import { isUtf8 } from "node:buffer";
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";

/**
 * Nesting the scan follows before it leaves a request to the full check; far below the limit the
 * full check enforces, so a request passed here never comes near it.
 */
const MAX_SCAN_DEPTH = 32;

/** Messages whose content has rules of its own (timestamp and duration ranges, NUL in JSON data): always fully checked. */
const FULLY_CHECKED = new Set([
  "google.protobuf.Timestamp",
  "google.protobuf.Duration",
  "google.protobuf.Struct",
  "google.protobuf.Value",
  "google.protobuf.ListValue",
]);

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_DELIMITED = 2;
const WIRE_FIXED32 = 5;

/**
 * What one field number of a message may hold. `string` text is scanned; `int64` varints must be
 * short enough to be safe integers; `message` nests (a map's key/value entry too); `unproved` is
 * left to the full check whenever it is present (fixed 64-bit integers, groups).
 */
type FieldScan =
  | { kind: "unproved" }
  | { kind: "string"; mapKey?: true }
  | { kind: "int64" }
  | { kind: "other"; wire: number }
  | { kind: "message"; of: () => MessageScan | undefined };

type MessageScan = Map<number, FieldScan>;

const plans = new WeakMap<DescMessage, MessageScan | undefined>();

/**
 * Whether a request's bytes certainly pass every check decodeRequest makes, proved in one walk of
 * the wire format without building a message: well-formed for its descriptor, shallow, text that is
 * valid UTF-8 without control characters, no map key `__proto__`, 64-bit integers no longer than 7
 * varint bytes (under 2^49, so safe), and no timestamp, duration or JSON data (those have rules of
 * their own). False means only "not proved": the caller then runs the full check, which finds and
 * names whatever is wrong, if anything.
 */
export function passesWireScan(desc: DescMessage, bytes: Uint8Array): boolean {
  const plan = planOf(desc);
  return plan !== undefined && scanMessage(plan, bytes, 0, bytes.length, 1);
}

function planOf(desc: DescMessage): MessageScan | undefined {
  if (plans.has(desc)) return plans.get(desc);
  const plan = FULLY_CHECKED.has(desc.typeName) ? undefined : new Map(desc.fields.map((field) => [field.number, fieldScan(field)]));
  plans.set(desc, plan);
  return plan;
}

const UNPROVED: FieldScan = { kind: "unproved" };
const MAP_KEY: FieldScan = { kind: "string", mapKey: true };
/** The one map key a JavaScript object cannot hold as data (see checkRequest's map keys). */
const PROTO_KEY = Buffer.from("__proto__");

function fieldScan(field: DescField): FieldScan {
  switch (field.fieldKind) {
    case "scalar":
      return scalarScan(field.scalar);
    case "enum":
      return { kind: "other", wire: WIRE_VARINT };
    case "message":
      return field.delimitedEncoding ? UNPROVED : messageScan(field.message);
    case "list":
      // A packed list arrives as one delimited field, which matches no scan here: the full check reads it.
      if (field.listKind === "message") return field.delimitedEncoding ? UNPROVED : messageScan(field.message);
      return field.listKind === "enum" ? { kind: "other", wire: WIRE_VARINT } : scalarScan(field.scalar);
    case "map": {
      const key = field.mapKey === ScalarType.STRING ? MAP_KEY : scalarScan(field.mapKey);
      const value = field.mapKind === "message" ? messageScan(field.message) : field.mapKind === "enum" ? { kind: "other" as const, wire: WIRE_VARINT } : scalarScan(field.scalar);
      const entry: MessageScan = new Map([
        [1, key],
        [2, value],
      ]);
      return { kind: "message", of: () => entry };
    }
  }
}

function messageScan(desc: DescMessage): FieldScan {
  // Resolved on first use: messages may refer to themselves.
  return { kind: "message", of: () => planOf(desc) };
}

function scalarScan(scalar: ScalarType): FieldScan {
  switch (scalar) {
    case ScalarType.STRING:
      return { kind: "string" };
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
      return { kind: "int64" };
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return UNPROVED;
    case ScalarType.BYTES:
      return { kind: "other", wire: WIRE_DELIMITED };
    case ScalarType.DOUBLE:
      return { kind: "other", wire: WIRE_FIXED64 };
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return { kind: "other", wire: WIRE_FIXED32 };
    default:
      return { kind: "other", wire: WIRE_VARINT };
  }
}

/** The end of the varint at `pos`, or -1 when it is truncated or longer than 10 bytes. */
function varintEnd(bytes: Uint8Array, pos: number, end: number): number {
  for (let i = 0; i < 10 && pos + i < end; i++) if (bytes[pos + i]! < 0x80) return pos + i + 1;
  return -1;
}

/** The varint at `pos` as a number, when it has at most 4 bytes (lengths and tags); else -1. */
function smallVarint(bytes: Uint8Array, pos: number, last: number): number {
  let value = 0;
  for (let i = pos, shift = 0; i < last; i++, shift += 7) value += (bytes[i]! & 0x7f) * 2 ** shift;
  return last - pos <= 4 ? value : -1;
}

function scanMessage(plan: MessageScan, bytes: Uint8Array, pos: number, end: number, depth: number): boolean {
  if (depth > MAX_SCAN_DEPTH) return false;
  while (pos < end) {
    const tagEnd = varintEnd(bytes, pos, end);
    if (tagEnd < 0) return false;
    const tag = smallVarint(bytes, pos, tagEnd);
    const number = Math.floor(tag / 8);
    const wire = tag & 7;
    if (tag < 0 || number === 0) return false;
    pos = tagEnd;
    const field = plan.get(number);
    let valueEnd: number;
    if (wire === WIRE_VARINT) {
      valueEnd = varintEnd(bytes, pos, end);
      if (valueEnd < 0) return false;
      if (field?.kind === "int64" && valueEnd - pos > 7) return false;
    } else if (wire === WIRE_FIXED64 || wire === WIRE_FIXED32) {
      valueEnd = pos + (wire === WIRE_FIXED64 ? 8 : 4);
      if (valueEnd > end) return false;
    } else if (wire === WIRE_DELIMITED) {
      const lengthEnd = varintEnd(bytes, pos, end);
      if (lengthEnd < 0) return false;
      const length = smallVarint(bytes, pos, lengthEnd);
      if (length < 0 || lengthEnd + length > end) return false;
      pos = lengthEnd;
      valueEnd = pos + length;
      if (field?.kind === "string" && !cleanText(bytes, pos, valueEnd)) return false;
      if (field?.kind === "string" && field.mapKey && length === PROTO_KEY.length && PROTO_KEY.equals(bytes.subarray(pos, valueEnd))) return false;
      if (field?.kind === "message") {
        const inner = field.of();
        if (!inner || !scanMessage(inner, bytes, pos, valueEnd, depth + 1)) return false;
      }
    } else {
      return false;
    }
    if (field && !matches(field, wire)) return false;
    pos = valueEnd;
  }
  return pos === end;
}

function matches(field: FieldScan, wire: number): boolean {
  switch (field.kind) {
    case "unproved":
      return false;
    case "string":
    case "message":
      return wire === WIRE_DELIMITED;
    case "int64":
      return wire === WIRE_VARINT;
    case "other":
      return wire === field.wire;
  }
}

/** Valid UTF-8 with no control character but tab, line feed and carriage return (each a single byte in UTF-8). */
function cleanText(bytes: Uint8Array, start: number, end: number): boolean {
  let ascii = true;
  for (let i = start; i < end; i++) {
    const b = bytes[i]!;
    if (b < 0x20) {
      if (b !== 0x09 && b !== 0x0a && b !== 0x0d) return false;
    } else if (b === 0x7f) {
      return false;
    } else if (b >= 0x80) {
      ascii = false;
    }
  }
  return ascii || isUtf8(bytes.subarray(start, end));
}
