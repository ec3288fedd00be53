import { fromJson, ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { registry } from "../descriptors.js";
import { findField, isObject } from "./binding.js";

/** How the transcoder reads request JSON: unknown fields are ignored, Any types resolve in the registry. */
export const JSON_READ = { ignoreUnknownFields: true, registry };

/**
 * protobuf-es reports a JSON type error by the innermost field (`StringValue.value`); this finds the
 * request field that holds the bad value by decoding one field at a time, descending into messages,
 * list items (`namespaces[1].name`) and map values (`labels["k"]`).
 */
export function locateJsonError(
  desc: DescMessage,
  json: JsonObject,
  prefix: string,
): { field: string; problem: string } | undefined {
  for (const [key, value] of Object.entries(json)) {
    const field = findField(desc, key);
    if (!field) continue;
    try {
      fromJson(desc, { [key]: value }, JSON_READ);
      continue;
    } catch (error) {
      const path = prefix ? `${prefix}.${field.name}` : field.name;
      const element = (at: string, item: JsonValue, attempt: JsonValue) => {
        try {
          fromJson(desc, { [key]: attempt }, JSON_READ);
          return undefined;
        } catch (itemError) {
          const inner = isPlainMessage(elementMessage(field)) && isObject(item)
            ? locateJsonError(elementMessage(field)!, item, at)
            : undefined;
          return inner ?? { field: at, problem: describeJsonProblem(field, itemError, true) };
        }
      };
      if (field.fieldKind === "message" && isPlainMessage(field.message) && isObject(value)) {
        const inner = locateJsonError(field.message, value, path);
        if (inner) return inner;
      }
      if (field.fieldKind === "list" && Array.isArray(value)) {
        for (const [i, item] of value.entries()) {
          const found = element(`${path}[${i}]`, item, [item]);
          if (found) return found;
        }
      }
      if (field.fieldKind === "map" && isObject(value)) {
        for (const [k, item] of Object.entries(value)) {
          const found = element(`${path}[${JSON.stringify(k)}]`, item, { [k]: item });
          if (found) return found;
        }
      }
      return { field: path, problem: describeJsonProblem(field, error) };
    }
  }
  return undefined;
}

/** A message with the ordinary JSON object form (not a well-known type with its own). */
function isPlainMessage(message: DescMessage | undefined): message is DescMessage {
  return message !== undefined && !message.typeName.startsWith("google.protobuf.");
}

/** The message type of a message field, or of the items of a list or values of a map of messages. */
function elementMessage(field: DescField): DescMessage | undefined {
  if (field.fieldKind === "message") return field.message;
  if (field.fieldKind === "list" && field.listKind === "message") return field.message;
  if (field.fieldKind === "map" && field.mapKind === "message") return field.message;
  return undefined;
}

/** What a bad value should have been; `element` describes one item of a list or value of a map. */
function describeJsonProblem(field: DescField, error: unknown, element = false): string {
  const detail = (error instanceof Error ? error.message : String(error)).split(": ").at(-1);
  let expected: string;
  if (!element && field.fieldKind === "list") expected = "a list";
  else if (!element && field.fieldKind === "map") expected = "an object";
  else if (field.enum) expected = `one of ${field.enum.values.map((v) => v.name).join(", ")}`;
  else if (field.message) expected = isPlainMessage(field.message) ? "an object" : withArticle(messageLabel(field.message));
  else if (field.scalar !== undefined) expected = withArticle(scalarLabel(field.scalar));
  else expected = "a valid value";
  return `must be ${expected} (${detail})`;
}

function withArticle(label: string): string {
  return /^(?:[aeiou]|RFC)/i.test(label) ? `an ${label}` : `a ${label}`;
}

function messageLabel(message: DescMessage): string {
  const name = message.typeName.replace("google.protobuf.", "");
  if (name === "Timestamp") return "RFC 3339 timestamp string";
  if (name === "Duration") return 'duration string such as "1.5s"';
  if (name === "FieldMask") return "comma-separated field list";
  const wrapped: Record<string, string> = {
    BoolValue: "boolean",
    StringValue: "string",
    BytesValue: "base64 string",
    DoubleValue: "number",
    FloatValue: "number",
    Int32Value: "integer",
    UInt32Value: "integer",
    Int64Value: "integer",
    UInt64Value: "integer",
  };
  return wrapped[name] ?? name;
}

function scalarLabel(scalar: ScalarType): string {
  switch (scalar) {
    case ScalarType.STRING:
      return "string";
    case ScalarType.BOOL:
      return "boolean";
    case ScalarType.BYTES:
      return "base64 string";
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return "number";
    default:
      return "integer";
  }
}
