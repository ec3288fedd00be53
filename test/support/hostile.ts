import { fromJson, ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import fc from "fast-check";

/** fast-check's imperative draw (fc.gen()): `g(fc.integer, { min: 0 })`. */
export type Draw = fc.GeneratorValue;

const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);
const UINT64_MAX = 2n ** 64n - 1n;

/** Deep enough to pass the service's nesting limit (100), shallow enough for JSON.stringify here. */
const DEEP_LEVELS = [99, 101, 2_000];

export function deepObject(levels: number): JsonValue {
  let value: JsonValue = "bottom";
  for (let i = 0; i < levels; i++) value = i % 2 ? { a: value } : [value];
  return value;
}

/** Text a stranger might send: control characters, odd Unicode, path tricks, ids of every shape, huge runs. */
export function hostileString(g: Draw): string {
  switch (g(fc.integer, { min: 0, max: 5 })) {
    case 0:
      return g(fc.string, { maxLength: 24 });
    case 1:
      return g(fc.string, { unit: "binary", maxLength: 24 });
    case 2:
      return `${g(fc.string, { maxLength: 6 })}${g(fc.constantFrom, "\u0000", "\u0007", "\u001b[31m", "\u007f", "\ud800", "\r\n")}`;
    case 3:
      return g(fc.constantFrom, "x".repeat(100_000), "é".repeat(5_000), "😀".repeat(1_000), "a".repeat(201));
    case 4:
      return g(fc.uuid);
    default:
      return g(
        fc.constantFrom,
        "",
        " ",
        "..",
        "../..",
        "%00",
        "%zz",
        "*",
        "admin",
        "request.completed",
        "00000000-0000-4000-8000-000000000000",
        "http://127.0.0.1:9/hook",
        "https://example.com/a.mp4",
        "default",
      );
  }
}

/** Any JSON value, sometimes nested past the service's limit. */
export function hostileJson(g: Draw): JsonValue {
  if (g(fc.integer, { min: 0, max: 9 }) === 0) return deepObject(g(fc.constantFrom, ...DEEP_LEVELS));
  return g(fc.jsonValue, { maxDepth: 3 }) as JsonValue;
}

/** A request in proto3 JSON for `desc`: mostly the right shapes with hostile contents, sometimes wrong types. */
export function jsonMessage(desc: DescMessage, g: Draw, depth = 0): JsonValue {
  const special = wellKnownJson(desc, g);
  if (special !== undefined) return special;
  const json: JsonObject = {};
  for (const field of desc.fields) {
    if (!g(fc.boolean)) continue;
    json[g(fc.boolean) ? field.name : field.jsonName] = g(fc.integer, { min: 0, max: 9 }) === 0 ? hostileJson(g) : jsonField(field, g, depth);
  }
  if (g(fc.integer, { min: 0, max: 4 }) === 0) json[hostileString(g).slice(0, 40)] = hostileJson(g);
  return json;
}

function jsonField(field: DescField, g: Draw, depth: number): JsonValue {
  switch (field.fieldKind) {
    case "list": {
      const length = g(fc.integer, { min: 0, max: 3 });
      return Array.from({ length }, () => jsonSingle(field, g, depth));
    }
    case "map": {
      const entries: JsonObject = {};
      for (let i = g(fc.integer, { min: 0, max: 3 }); i > 0; i--) entries[hostileString(g).slice(0, 300)] = jsonSingle(field, g, depth);
      return entries;
    }
    default:
      return jsonSingle(field, g, depth);
  }
}

function jsonSingle(field: DescField, g: Draw, depth: number): JsonValue {
  if (field.message) return depth >= 3 ? {} : jsonMessage(field.message, g, depth + 1);
  if (field.enum) return g(fc.boolean) ? g(fc.constantFrom, ...field.enum.values.map((v) => v.name)) : g(fc.integer);
  return jsonScalar(field.scalar!, g);
}

function jsonScalar(scalar: ScalarType, g: Draw): JsonValue {
  switch (scalar) {
    case ScalarType.STRING:
      return hostileString(g);
    case ScalarType.BOOL:
      return g(fc.boolean);
    case ScalarType.BYTES:
      return g(fc.base64String, { maxLength: 40 });
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return g(() => fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom("NaN", "Infinity", "-Infinity", 1e308)));
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return g(() => fc.oneof(int64Extremes().map(String), fc.constant(String(UINT64_MAX)), fc.bigInt({ min: INT64_MIN, max: UINT64_MAX }).map(String), fc.integer()));
    default:
      return g(() => fc.oneof(fc.integer(), fc.constantFrom(2 ** 31, -(2 ** 31) - 1, 2 ** 32, -1, 1.5, "12", "x")));
  }
}

function wellKnownJson(desc: DescMessage, g: Draw): JsonValue | undefined {
  switch (desc.typeName) {
    case "google.protobuf.Timestamp":
      return g(() =>
        fc.oneof(
          fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
          fc.constantFrom("0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "10000-01-01T00:00:00Z", "0000-01-01T00:00:00Z", "soon", "2026-13-40T25:61:61Z"),
        ),
      );
    case "google.protobuf.Duration":
      return g(fc.constantFrom, "1s", "-315576000001s", "1.5s", "forever");
    case "google.protobuf.FieldMask":
      return g(fc.array, fc.string({ maxLength: 12 }), { maxLength: 3 }).join(",");
    case "google.protobuf.Struct":
      return g(fc.boolean) ? deepObject(g(fc.constantFrom, ...DEEP_LEVELS.map((n) => n * 2))) : (g(fc.dictionary, fc.string(), fc.jsonValue({ maxDepth: 2 })) as JsonValue);
    case "google.protobuf.Value":
    case "google.protobuf.ListValue":
      return hostileJson(g);
    default:
      return desc.typeName.startsWith("google.protobuf.") && desc.fields.length === 1 && desc.fields[0]!.name === "value"
        ? jsonScalar(desc.fields[0]!.scalar!, g)
        : undefined;
  }
}

/** Signed 64-bit values at and just past the edges of what a JavaScript number holds exactly. */
function int64Extremes(): fc.Arbitrary<bigint> {
  return fc.constantFrom(INT64_MAX, INT64_MIN, 2n ** 53n, -(2n ** 53n) - 1n, -1n, 0n);
}

/** A well-typed message for `desc` with hostile contents: 64-bit extremes, out-of-range timestamps, deep Structs. */
export function binaryMessage(desc: DescMessage, g: Draw, depth = 0): ReflectMessage {
  const message = reflect(desc);
  if (desc.typeName === "google.protobuf.Timestamp") {
    message.set(desc.field.seconds!, g(() => fc.oneof(int64Extremes(), fc.bigInt({ min: -62_135_596_801n, max: 253_402_300_800n }))));
    message.set(desc.field.nanos!, g(() => fc.oneof(fc.constantFrom(-1, 1_000_000_000, 2 ** 31 - 1), fc.integer({ min: 0, max: 999_999_999 }))));
    return message;
  }
  if (["Struct", "Value", "ListValue"].includes(desc.name) && desc.typeName.startsWith("google.protobuf.")) {
    const json = desc.name === "Struct" ? jsonMessage(desc, g) : desc.name === "ListValue" ? [hostileJson(g)] : hostileJson(g);
    try {
      return reflect(desc, fromJson(desc, json));
    } catch {
      // protobuf-es builds no Struct past 100 levels; the deep ones go over HTTP and in hostile-input.test.ts.
      return reflect(desc);
    }
  }
  for (const field of desc.fields) {
    if (!g(fc.boolean)) continue;
    switch (field.fieldKind) {
      case "scalar":
        message.set(field, binaryScalar(field.scalar, g));
        break;
      case "enum":
        message.set(field, g(fc.integer, { min: -5, max: 20 }));
        break;
      case "message":
        if (depth < 3) message.set(field, binaryMessage(field.message, g, depth + 1));
        break;
      case "list": {
        const list = message.get(field);
        for (let i = g(fc.integer, { min: 0, max: 3 }); i > 0; i--) {
          if (field.listKind === "message") {
            if (depth < 3) list.add(binaryMessage(field.message, g, depth + 1));
          } else if (field.listKind === "enum") list.add(g(fc.integer, { min: -5, max: 20 }));
          else list.add(binaryScalar(field.scalar, g));
        }
        break;
      }
      case "map": {
        const map = message.get(field);
        for (let i = g(fc.integer, { min: 0, max: 3 }); i > 0; i--) {
          const key = field.mapKey === ScalarType.STRING ? hostileString(g).slice(0, 300).toWellFormed() : binaryScalar(field.mapKey, g);
          if (field.mapKind === "message") {
            if (depth < 3) map.set(key, binaryMessage(field.message, g, depth + 1));
          } else if (field.mapKind === "enum") map.set(key, g(fc.integer, { min: 0, max: 5 }));
          else map.set(key, binaryScalar(field.scalar, g));
        }
        break;
      }
    }
  }
  return message;
}

function binaryScalar(scalar: ScalarType, g: Draw): string | number | bigint | boolean | Uint8Array {
  switch (scalar) {
    case ScalarType.STRING:
      // protobuf-es encodes only well-formed text; broken UTF-8 comes from brokenBytes.
      return hostileString(g).toWellFormed();
    case ScalarType.BOOL:
      return g(fc.boolean);
    case ScalarType.BYTES:
      return g(fc.uint8Array, { maxLength: 40 });
    case ScalarType.DOUBLE:
      return g(fc.double);
    case ScalarType.FLOAT:
      return g(fc.float, { noDefaultInfinity: true, noNaN: true });
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return g(() => fc.oneof(int64Extremes(), fc.bigInt({ min: INT64_MIN, max: INT64_MAX })));
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return g(() => fc.oneof(fc.constantFrom(UINT64_MAX, 2n ** 53n, 0n), fc.bigInt({ min: 0n, max: UINT64_MAX })));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return g(() => fc.oneof(fc.constantFrom(2 ** 32 - 1, 0), fc.nat()));
    default:
      return g(() => fc.oneof(fc.constantFrom(2 ** 31 - 1, -(2 ** 31), -1), fc.integer()));
  }
}

/** Bytes that are not a valid message: truncated, an undefined wire type, a length past the end, noise. */
export function brokenBytes(valid: Uint8Array, g: Draw): Uint8Array {
  switch (g(fc.integer, { min: 0, max: 3 })) {
    case 0:
      return valid.length > 1 ? valid.slice(0, g(fc.integer, { min: 1, max: valid.length - 1 })) : Uint8Array.of(0x10, 0xff);
    case 1:
      return Buffer.concat([valid, Uint8Array.of(0x0f, 0x00)]);
    case 2:
      return Buffer.concat([valid, Uint8Array.of(0x0a, 0x7f, 0x61)]);
    default:
      return g(fc.uint8Array, { minLength: 1, maxLength: 64 });
  }
}
