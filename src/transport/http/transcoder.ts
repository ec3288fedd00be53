import type { IncomingMessage, ServerResponse } from "node:http";
import {
  fromBinary,
  fromJson,
  getOption,
  toBinary,
  toJson,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { protoCamelCase, protoSnakeCase } from "@bufbuild/protobuf/reflect";
import type { Credential } from "../../platform/auth.js";
import { Code, invalidArgument, RpcError } from "../../platform/errors.js";
import { requestIdOf, type IncomingCall } from "../call.js";
import { registry } from "../descriptors.js";
import { MAX_REQUEST_DEPTH } from "../request-decoder.js";
import type { RoutedMethod, Router } from "../router.js";
import { matchPathTemplate, parsePathTemplate, type PathTemplate } from "./path-template.js";
import { BODY_TOO_LARGE, credentialOf, isSameOrigin, readBody } from "./request.js";
import { writeJson, writeRpcError } from "./responses.js";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/** What the transcoder needs of the request target: the path as sent (no dot-segment folding) and the query. */
export interface RequestTarget {
  pathname: string;
  searchParams: URLSearchParams;
}

interface Route {
  verb: string;
  template: PathTemplate;
  /** "" (no body), "*" (the whole request) or a top-level request field. */
  body: string;
  /** The top-level response field that is the HTTP body (response_body); undefined: the whole response. */
  responseField: (DescField & { fieldKind: "message" }) | undefined;
  method: RoutedMethod;
  input: DescMessage;
  output: DescMessage;
}

type Match = { route: Route; variables: Map<string, string> };

const httpRuleExtension = registry.getExtension("google.api.http");

/**
 * Serves every routed method that has a google.api.http rule as JSON over HTTP, through the same
 * handlers and interceptor chain as gRPC. JSON follows the proto3 mapping: input accepts proto and
 * JSON field names and ignores unknown fields; output uses proto (snake_case) names and includes
 * fields at their default values.
 */
export class Transcoder {
  private readonly routes: Route[] = [];

  constructor(router: Router) {
    if (!httpRuleExtension) throw new Error("google.api.http is missing from the descriptor set");
    for (const method of router.methods.values()) {
      const desc = method.descriptor;
      const rule = getOption(desc, httpRuleExtension) as unknown as HttpRule | undefined;
      if (!rule?.pattern?.case) continue;
      for (const binding of [rule, ...(rule.additionalBindings ?? [])]) {
        const { case: verb, value } = binding.pattern;
        if (!verb) continue;
        const path = verb === "custom" ? (value as { path: string }).path : (value as string);
        const httpVerb = verb === "custom" ? (value as { kind: string }).kind.toUpperCase() : verb.toUpperCase();
        this.routes.push({
          verb: httpVerb,
          template: parsePathTemplate(path),
          body: binding.body,
          responseField: responseFieldOf(desc.output, binding.responseBody, method.path),
          method,
          input: desc.input,
          output: desc.output,
        });
      }
    }
    // Most literal segments first; a template with a verb before one without.
    this.routes.sort(
      (a, b) => b.template.literalCount - a.template.literalCount || Number(!!b.template.verb) - Number(!!a.template.verb),
    );
  }

  /** Handles the request when a route matches its path; returns false otherwise. */
  async handle(
    req: IncomingMessage,
    res: ServerResponse,
    url: RequestTarget,
    requestId = requestIdOf(req.headers["x-request-id"]),
  ): Promise<boolean> {
    const match = this.match(req.method ?? "GET", url.pathname);
    if (match === undefined) return false;
    const headers: Record<string, string> = { "x-request-id": requestId };
    if (match === "method-not-allowed") {
      writeRpcError(
        res,
        new RpcError(Code.UNIMPLEMENTED, `method ${req.method} is not allowed on ${url.pathname}`, {
          reason: "METHOD_NOT_ALLOWED",
        }),
        headers,
        405,
      );
      return true;
    }
    const { route, variables } = match;
    try {
      const credential = credentialOf(req);
      checkCsrf(req, route, credential);
      const json = await this.buildRequestJson(req, url, route, variables);
      const request = encodeRequest(route, json);
      const result = await route.method.invoke(request, incomingCall(res, credential, requestId));
      Object.assign(headers, result.headers);
      writeJson(res, 200, encodeResponse(route, result.response), headers);
    } catch (error) {
      if (error instanceof RpcError) {
        const tooLarge = error.reason === BODY_TOO_LARGE;
        // A body left unread cannot be skipped to reach a next request on this connection.
        if (tooLarge && !req.complete) headers.connection = "close";
        writeRpcError(res, error, headers, tooLarge ? 413 : undefined);
      } else {
        throw error;
      }
    }
    return true;
  }

  private match(verb: string, path: string): Match | "method-not-allowed" | undefined {
    let pathMatched = false;
    for (const route of this.routes) {
      const variables = matchPathTemplate(route.template, path);
      if (!variables) continue;
      if (route.verb === verb) return { route, variables };
      pathMatched = true;
    }
    return pathMatched ? "method-not-allowed" : undefined;
  }

  private async buildRequestJson(
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
        normalizeKeys(route.input, json);
      } else if (body !== undefined) {
        const field = findField(route.input, route.body);
        json[route.body] = field ? normalizeValue(field, body) : body;
      }
    }
    const bound = new Set<string>();
    for (const [fieldPath, value] of variables) {
      setField(route.input, json, fieldPath.split("."), value, false);
      bound.add(fieldPath.split(".")[0]!);
    }
    if (route.body !== "*") {
      for (const [key, value] of url.searchParams) {
        const path = key.split(".");
        if (bound.has(path[0]!) || path[0] === route.body) continue;
        setField(route.input, json, path, value, true);
      }
    }
    return json;
  }
}

interface HttpRule {
  pattern: { case: string | undefined; value: unknown };
  body: string;
  responseBody: string;
  additionalBindings?: HttpRule[];
}

/** The request's protobuf bytes; the Router decodes and checks them as it does a gRPC request's. */
function encodeRequest(route: Route, json: JsonObject): Uint8Array {
  const depth = jsonDepth(json);
  if (depth > MAX_REQUEST_DEPTH) {
    throw invalidArgument([{ field: "body", description: `nests deeper than ${MAX_REQUEST_DEPTH} levels` }], "INVALID_JSON");
  }
  let message;
  try {
    message = fromJson(route.input, json, JSON_READ);
  } catch (error) {
    const { field, problem } = locateJsonError(route.input, json, "") ?? { field: "body", problem: String(error) };
    throw invalidArgument([{ field, description: problem }], "INVALID_JSON");
  }
  return toBinary(route.input, message);
}

/** How deep objects and arrays nest in a parsed JSON value, found without recursion. */
function jsonDepth(json: JsonValue): number {
  let deepest = 0;
  const stack: [JsonValue, number][] = [[json, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (typeof value !== "object" || value === null) continue;
    deepest = Math.max(deepest, depth);
    if (depth > MAX_REQUEST_DEPTH) break;
    for (const item of Object.values(value)) stack.push([item, depth + 1]);
  }
  return deepest;
}

const JSON_READ = { ignoreUnknownFields: true, registry };

/**
 * protobuf-es reports a JSON type error by the innermost field (`StringValue.value`); this finds the
 * request field that holds the bad value by decoding one field at a time, descending into messages,
 * list items (`namespaces[1].name`) and map values (`labels["k"]`).
 */
function locateJsonError(
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

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
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

/** The message field a binding's response_body names, checked once when the routes are built. */
function responseFieldOf(output: DescMessage, responseBody: string, path: string): Route["responseField"] {
  if (responseBody === "") return undefined;
  const field = output.fields.find((f) => f.name === responseBody);
  if (!field || field.fieldKind !== "message") throw new Error(`bad response_body in ${path}`);
  return field;
}

function encodeResponse(route: Route, response: unknown): JsonValue {
  const bytes = route.method.definition.responseSerialize(response);
  const message = fromBinary(route.output, bytes) as unknown as Record<string, unknown>;
  const options = { useProtoFieldName: true, alwaysEmitImplicit: true, registry };
  const field = route.responseField;
  const desc = field ? field.message : route.output;
  const value = field ? message[field.localName] : message;
  if (value === undefined) return null;
  const json = toJson(desc, value as never, options);
  return route.method.service.nullWhenUnset ? withNulls(desc, json) : json;
}

/** Unset message fields, at any depth, as `null` (see ServiceImplementation.nullWhenUnset). */
function withNulls(desc: DescMessage, json: JsonValue): JsonValue {
  if (!isObject(json) || desc.typeName.startsWith("google.protobuf.")) return json;
  for (const field of desc.fields) {
    const value = json[field.name];
    if (field.fieldKind === "message") {
      json[field.name] = value === undefined ? null : withNulls(field.message, value);
    } else if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
      json[field.name] = value.map((item) => withNulls(field.message, item));
    }
  }
  return json;
}

/**
 * The field a JSON key or query parameter names: its proto name, its JSON name, or the lowerCamel
 * name protoc would derive (a field with `json_name = "service_export_to"` still accepts
 * `serviceExportTo`, as a client that knows only the proto3 JSON convention would send).
 */
function findField(message: DescMessage, name: string): DescField | undefined {
  return (
    message.fields.find((f) => f.name === name || f.jsonName === name) ??
    message.fields.find((f) => protoCamelCase(f.name) === name)
  );
}

/**
 * Renames lowerCamel aliases (see findField) to proto names throughout a request object, in place,
 * so the proto3 JSON reader sees names it knows; a key already given by its own name wins.
 */
function normalizeKeys(message: DescMessage, json: JsonObject): void {
  if (message.typeName.startsWith("google.protobuf.")) return;
  for (const key of Object.keys(json)) {
    const field = findField(message, key);
    if (!field) continue;
    let target = key;
    if (key !== field.name && key !== field.jsonName) {
      target = field.name;
      const value = json[key];
      delete json[key];
      if (Object.hasOwn(json, field.name) || Object.hasOwn(json, field.jsonName)) continue;
      json[target] = value!;
    }
    json[target] = normalizeValue(field, json[target]!);
  }
}

function normalizeValue(field: DescField, value: JsonValue): JsonValue {
  if (field.fieldKind === "message" && isObject(value)) normalizeKeys(field.message, value);
  if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
    for (const item of value) if (isObject(item)) normalizeKeys(field.message, item);
  }
  if (field.fieldKind === "map" && field.mapKind === "message" && isObject(value)) {
    for (const item of Object.values(value)) if (isObject(item)) normalizeKeys(field.message, item);
  }
  return value;
}

/**
 * Sets a path variable or query parameter on the request JSON, converting the string to the JSON
 * form the field's type expects. Unknown names are ignored, like unknown JSON fields.
 */
function setField(message: DescMessage, json: JsonObject, path: string[], raw: string, fromQuery: boolean): void {
  const field = findField(message, path[0]!);
  if (!field) return;
  const key = field.name;
  if (path.length > 1) {
    if (field.fieldKind !== "message") return;
    const child = (json[key] ??= {}) as JsonObject;
    if (typeof child !== "object" || child === null || Array.isArray(child)) return;
    setField(field.message, child, path.slice(1), raw, fromQuery);
    return;
  }
  const value = scalarJson(field, raw);
  if (field.fieldKind === "list" && fromQuery) {
    const list = Array.isArray(json[key]) ? (json[key] as JsonValue[]) : [];
    list.push(value);
    json[key] = list;
  } else {
    json[key] = value;
  }
}

function scalarJson(field: DescField, raw: string): JsonValue {
  if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.FieldMask") {
    // A query parameter lists paths as written (`update_mask=service_export_to,metadata`), like
    // grpc-gateway; the JSON form the reader expects is lowerCamel.
    return raw
      .split(",")
      .map((path) =>
        path
          .split(".")
          .map((part) => (protoSnakeCase(protoCamelCase(part)) === part ? protoCamelCase(part) : part))
          .join("."),
      )
      .join(",");
  }
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

/**
 * A cookie rides along on cross-site requests; a POST authenticated by it must be JSON (which a
 * plain HTML form cannot send), and any write must not come from another origin (isSameOrigin).
 */
function checkCsrf(req: IncomingMessage, route: Route, credential: Credential | undefined): void {
  if (credential?.source !== "cookie" || route.verb === "GET") return;
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  // A form or another site's "simple" request can only POST; PUT, PATCH and DELETE from another
  // origin need a CORS preflight, which this server never grants.
  if (route.verb === "POST" && type !== "application/json") {
    throw new RpcError(Code.PERMISSION_DENIED, "cookie-authenticated writes must send Content-Type: application/json", {
      reason: "CSRF_CONTENT_TYPE",
    });
  }
  if (!isSameOrigin(req)) {
    throw new RpcError(Code.PERMISSION_DENIED, "cross-origin cookie-authenticated write refused", {
      reason: "CSRF_ORIGIN",
    });
  }
}

async function readJsonBody(req: IncomingMessage): Promise<JsonValue | undefined> {
  const text = (await readBody(req, MAX_JSON_BODY_BYTES)).toString("utf8");
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

function incomingCall(res: ServerResponse, credential: Credential | undefined, requestId: string): IncomingCall {
  const controller = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) controller.abort(new Error("client disconnected"));
  });
  return { transport: "http", credential, signal: controller.signal, deadline: undefined, requestId };
}
