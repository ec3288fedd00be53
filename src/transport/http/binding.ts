import { isUtf8 } from "node:buffer";
import type { IncomingMessage } from "node:http";
import { ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { protoCamelCase, protoSnakeCase } from "@bufbuild/protobuf/reflect";
import { invalidArgument } from "../../platform/errors.js";
import { quoted } from "../request-decoder.js";
import { readBody, type RequestTarget } from "./request.js";
import type { Route } from "./routes.js";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/**
 * Request headers that stand for a request field, for the methods whose request has that field, as
 * HTTP clients expect to send them (`Idempotency-Key`, as Stripe and the IETF draft name it).
 */
const HEADER_FIELDS: readonly { header: string; field: string }[] = [{ header: "idempotency-key", field: "idempotency_key" }];

/**
 * The request as proto3 JSON: the body (all of it, or the field the binding names), the path variables
 * and the query parameters, each converted to the JSON form of the field it sets.
 */
export async function bindRequest(
  req: IncomingMessage,
  url: RequestTarget,
  route: Route,
  variables: Map<string, string>,
): Promise<JsonObject> {
  let json: JsonObject = {};
  if (route.body !== "") {
    const body = await readJsonBody(req);
    if (route.body === "*") {
      if (body !== undefined && (typeof body !== "object" || body === null || Array.isArray(body))) {
        throw invalidArgument([{ field: "body", description: "must be a JSON object" }]);
      }
      json = (body as JsonObject | undefined) ?? {};
      normalizeKeys(route.input, json, "");
    } else if (body !== undefined) {
      const field = findField(route.input, route.body);
      json[route.body] = field ? normalizeValue(field, body, route.body) : body;
    }
  }
  const bound = new Set<string>();
  for (const [fieldPath, value] of variables) {
    setField(route.input, json, fieldPath.split("."), value, false);
    bound.add(fieldPath.split(".")[0]!);
  }
  // With the whole request in the body, query parameters fill only what the body leaves out (the
  // update mask of `PATCH …?update_mask=weight` with the changes in the body, as on routes whose body
  // is one field); one given in both must agree.
  const query: JsonObject = {};
  const into = route.body === "*" ? query : json;
  for (const [key, value] of url.searchParams) {
    const path = key.split(".");
    if (bound.has(path[0]!) || (route.body !== "*" && path[0] === route.body)) continue;
    setField(route.input, into, path, value, true);
  }
  mergeQuery(json, query, "");
  bindHeaders(req, route, json);
  return json;
}

/**
 * Sets what the query gives (`query`, proto names, values as the query wrote them) on the body's
 * request, leaf by leaf; a leaf given in both must say the same (`3` in the body is `weight=3`).
 */
function mergeQuery(json: JsonObject, query: JsonObject, prefix: string): void {
  for (const [name, value] of Object.entries(query)) {
    const path = prefix ? `${prefix}.${name}` : name;
    const given = json[name];
    if (given === undefined) json[name] = value;
    else if (isObject(given) && isObject(value)) mergeQuery(given, value, path);
    else if (!sameLeaf(given, value)) {
      throw invalidArgument([{ field: path, description: "differs between the query and the body; give it in one of them, or the same in both" }]);
    }
  }
}

/** Whether a body's value and a query's say the same: the query's are text, the body's JSON. */
function sameLeaf(body: JsonValue, query: JsonValue): boolean {
  if (Array.isArray(body) && Array.isArray(query)) return body.length === query.length && body.every((item, i) => sameLeaf(item, query[i]!));
  return !isObject(body) && !Array.isArray(body) && String(body) === String(query);
}

/**
 * Fills a field from its header (HEADER_FIELDS). The header and the field say the same thing, so
 * either may carry it; given in both, they must agree, or the request is refused naming the field.
 */
function bindHeaders(req: IncomingMessage, route: Route, json: JsonObject): void {
  for (const { header, field: name } of HEADER_FIELDS) {
    const value = req.headers[header];
    const field = findField(route.input, name);
    if (typeof value !== "string" || !field) continue;
    const given = json[field.name] ?? json[field.jsonName];
    if (given === undefined || given === "") {
      delete json[field.jsonName];
      json[field.name] = value;
    } else if (given !== value) {
      throw invalidArgument([
        { field: field.name, description: `differs from the ${headerName(header)} header; send one of them, or the same value in both` },
      ]);
    }
  }
}

/** `idempotency-key` as people write it: `Idempotency-Key`. */
function headerName(header: string): string {
  return header.replace(/(^|-)([a-z])/g, (_, dash: string, letter: string) => dash + letter.toUpperCase());
}

export function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The field a JSON key or query parameter names: its proto name, its JSON name, or the lowerCamel
 * name protoc would derive (a field with `json_name = "service_export_to"` still accepts
 * `serviceExportTo`, as a client that knows only the proto3 JSON convention would send).
 */
export function findField(message: DescMessage, name: string): DescField | undefined {
  return (
    message.fields.find((f) => f.name === name || f.jsonName === name) ??
    message.fields.find((f) => protoCamelCase(f.name) === name)
  );
}

/**
 * Renames JSON names and lowerCamel aliases (see findField) to proto names throughout a request
 * object, in place, so the proto3 JSON reader sees each field once, by a name it knows. A field given
 * under two of its names must have the same value under both.
 */
function normalizeKeys(message: DescMessage, json: JsonObject, prefix: string): void {
  if (message.typeName.startsWith("google.protobuf.")) return;
  for (const key of Object.keys(json)) {
    const field = findField(message, key);
    if (!field) continue;
    const path = prefix ? `${prefix}.${field.name}` : field.name;
    if (key !== field.name) {
      const value = json[key]!;
      delete json[key];
      const given = json[field.name];
      if (given !== undefined && JSON.stringify(given) !== JSON.stringify(value)) {
        throw invalidArgument([{ field: path, description: `is given twice, as ${field.name} and ${key}, with different values` }]);
      }
      json[field.name] = value;
    }
    json[field.name] = normalizeValue(field, json[field.name]!, path);
  }
}

/** `value` of `field` (at `path`) with its messages' keys normalized (see normalizeKeys). */
function normalizeValue(field: DescField, value: JsonValue, path: string): JsonValue {
  if (isFieldMask(field) && typeof value === "string") return fieldMaskJson(value);
  if (field.fieldKind === "message" && isObject(value)) normalizeKeys(field.message, value, path);
  if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
    value.forEach((item, i) => isObject(item) && normalizeKeys(field.message, item, `${path}[${i}]`));
  }
  if (field.fieldKind === "map" && field.mapKind === "message" && isObject(value)) {
    for (const [k, item] of Object.entries(value)) if (isObject(item)) normalizeKeys(field.message, item, `${path}[${quoted(k)}]`);
  }
  return value;
}

/**
 * Sets a path variable or query parameter on the request JSON, converting the string to the JSON
 * form the field's type expects. Unknown names are ignored, like unknown JSON fields.
 */
function setField(message: DescMessage, json: JsonObject, path: string[], raw: string, fromQuery: boolean, prefix = ""): void {
  const field = findField(message, path[0]!);
  if (!field) return;
  const key = field.name;
  const at = prefix ? `${prefix}.${key}` : key;
  if (path.length > 1) {
    if (field.fieldKind !== "message") return;
    const child = (json[key] ??= {}) as JsonObject;
    if (typeof child !== "object" || child === null || Array.isArray(child)) return;
    setField(field.message, child, path.slice(1), raw, fromQuery, at);
    return;
  }
  const value = scalarJson(field, raw);
  if (field.fieldKind === "list" && fromQuery) {
    const list = Array.isArray(json[key]) ? (json[key] as JsonValue[]) : [];
    list.push(value);
    json[key] = list;
  } else if (fromQuery && json[key] !== undefined) {
    // `update_mask=comment&update_mask=owners` means both; any other field given twice, one of them
    // would be dropped unseen.
    if (!isFieldMask(field)) throw invalidArgument([{ field: at, description: "is given more than once in the query" }]);
    json[key] = `${json[key] as string},${value as string}`;
  } else {
    json[key] = value;
  }
}

function isFieldMask(field: DescField): boolean {
  return field.fieldKind === "message" && field.message.typeName === "google.protobuf.FieldMask";
}

/**
 * A field mask's paths in the JSON form the reader expects, lowerCamel, from the proto names people
 * write (`service_export_to,metadata`, as grpc-gateway takes them); lowerCamel ones stay as they are.
 */
function fieldMaskJson(paths: string): string {
  return paths
    .split(",")
    .map((path) =>
      path
        .split(".")
        .map((part) => (protoSnakeCase(protoCamelCase(part)) === part ? protoCamelCase(part) : part))
        .join("."),
    )
    .join(",");
}

function scalarJson(field: DescField, raw: string): JsonValue {
  if (isFieldMask(field)) return fieldMaskJson(raw);
  const scalar =
    field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar")
      ? field.scalar
      : field.fieldKind === "message" && field.message.typeName === "google.protobuf.BoolValue"
        ? ScalarType.BOOL
        : undefined;
  if (scalar === ScalarType.BOOL) {
    if (raw === "true") return true;
    if (raw === "false") return false;
  }
  return raw;
}

async function readJsonBody(req: IncomingMessage): Promise<JsonValue | undefined> {
  const bytes = await readBody(req, MAX_JSON_BODY_BYTES);
  // Decoding would put U+FFFD in place of broken bytes, and the request would be taken as something it did not say.
  if (!isUtf8(bytes)) throw invalidArgument([{ field: "body", description: "is not valid UTF-8" }], "INVALID_JSON");
  const text = bytes.toString("utf8");
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text) as JsonValue;
  } catch (error) {
    throw invalidArgument(
      [{ field: "body", description: `is not valid JSON (${(error as Error).message})` }],
      "INVALID_JSON",
    );
  }
}
