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
import { parseBearer, type Credential } from "../../platform/auth.js";
import { Code, invalidArgument, RpcError } from "../../platform/errors.js";
import type { IncomingCall } from "../call.js";
import { registry } from "../descriptors.js";
import type { RoutedMethod, Router } from "../router.js";
import { matchPathTemplate, parsePathTemplate, type PathTemplate } from "./path-template.js";
import { writeJson, writeRpcError } from "./responses.js";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

interface Route {
  verb: string;
  template: PathTemplate;
  /** "" (no body), "*" (the whole request) or a top-level request field. */
  body: string;
  /** "" (the whole response) or a top-level response field. */
  responseBody: string;
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
      const [, serviceName, methodName] = method.path.split("/");
      const desc = registry.getService(serviceName!)?.methods.find((m) => m.name === methodName);
      if (!desc) throw new Error(`${method.path} is missing from the descriptor set`);
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
          responseBody: binding.responseBody,
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
  async handle(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
    const match = this.match(req.method ?? "GET", url.pathname);
    if (match === undefined) return false;
    if (match === "method-not-allowed") {
      writeRpcError(
        res,
        new RpcError(Code.UNIMPLEMENTED, `method ${req.method} is not allowed on ${url.pathname}`, {
          reason: "METHOD_NOT_ALLOWED",
        }),
        {},
        405,
      );
      return true;
    }
    const { route, variables } = match;
    const headers: Record<string, string> = {};
    try {
      const credential = credentialOf(req);
      checkCsrf(req, route, credential);
      const json = await this.buildRequestJson(req, url, route, variables);
      const request = decodeRequest(route, json);
      const result = await route.method.invoke(request, incomingCall(req, res, credential));
      Object.assign(headers, result.headers);
      writeJson(res, 200, encodeResponse(route, result.response), headers);
    } catch (error) {
      if (error instanceof RpcError) {
        writeRpcError(res, error, headers, error.reason === "BODY_TOO_LARGE" ? 413 : undefined);
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
    url: URL,
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
      } else if (body !== undefined) {
        json[route.body] = body;
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

function decodeRequest(route: Route, json: JsonObject): unknown {
  let message;
  try {
    message = fromJson(route.input, json, JSON_READ);
  } catch (error) {
    const { field, problem } = locateJsonError(route.input, json, "") ?? { field: "body", problem: String(error) };
    throw invalidArgument([{ field, description: problem }], "INVALID_JSON");
  }
  return route.method.definition.requestDeserialize(Buffer.from(toBinary(route.input, message)));
}

const JSON_READ = { ignoreUnknownFields: true, registry };

/**
 * protobuf-es reports a JSON type error by the innermost field (`StringValue.value`); this finds the
 * request field that holds the bad value by decoding one field at a time, descending into messages.
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
      if (
        field.fieldKind === "message" &&
        !field.message.typeName.startsWith("google.protobuf.") &&
        typeof value === "object" &&
        value !== null &&
        !Array.isArray(value)
      ) {
        const inner = locateJsonError(field.message, value, path);
        if (inner) return inner;
      }
      return { field: path, problem: describeJsonProblem(field, error) };
    }
  }
  return undefined;
}

function describeJsonProblem(field: DescField, error: unknown): string {
  const detail = (error instanceof Error ? error.message : String(error)).split(": ").at(-1);
  const expected =
    field.fieldKind === "list"
      ? "a list"
      : field.fieldKind === "map"
        ? "an object"
        : field.fieldKind === "message" && !field.message.typeName.startsWith("google.protobuf.")
          ? "an object"
          : field.fieldKind === "enum"
            ? `one of ${field.enum.values.map((v) => v.name).join(", ")}`
            : field.fieldKind === "scalar" || field.fieldKind === "message"
              ? `a ${typeLabel(field)}`
              : "a valid value";
  return `must be ${expected} (${detail})`;
}

function typeLabel(field: DescField): string {
  if (field.fieldKind === "message") {
    const name = field.message.typeName.replace("google.protobuf.", "");
    if (name === "Timestamp") return "RFC 3339 timestamp string";
    if (name === "Duration") return "duration string such as \"1.5s\"";
    if (name === "FieldMask") return "comma-separated field list";
    if (name.endsWith("Value")) return name.replace("Value", "").toLowerCase().replace(/^u?int\d+$/, "integer");
    return name;
  }
  if (field.fieldKind !== "scalar") return "value";
  switch (field.scalar) {
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

function encodeResponse(route: Route, response: unknown): JsonValue {
  const bytes = route.method.definition.responseSerialize(response);
  const message = fromBinary(route.output, bytes) as unknown as Record<string, unknown>;
  const options = { useProtoFieldName: true, alwaysEmitImplicit: true, registry };
  if (route.responseBody === "") return toJson(route.output, message as never, options);
  const field = route.output.fields.find((f) => f.name === route.responseBody);
  if (!field || field.fieldKind !== "message") throw new Error(`bad response_body in ${route.method.path}`);
  const value = message[field.localName];
  return value === undefined ? null : toJson(field.message, value as never, options);
}

function findField(message: DescMessage, name: string): DescField | undefined {
  return message.fields.find((f) => f.name === name || f.jsonName === name);
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

function credentialOf(req: IncomingMessage): Credential | undefined {
  const token = parseBearer(req.headers.authorization);
  if (token) return { token, source: "bearer" };
  const cookie = parseCookies(req.headers.cookie).get("auth_token");
  return cookie ? { token: cookie, source: "cookie" } : undefined;
}

export function parseCookies(header: string | undefined): Map<string, string> {
  const cookies = new Map<string, string>();
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    let value = part.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    try {
      cookies.set(name, decodeURIComponent(value));
    } catch {
      cookies.set(name, value);
    }
  }
  return cookies;
}

/**
 * A cookie rides along on cross-site requests; a write authenticated by it must be JSON (which a
 * plain HTML form cannot send) and, when the browser says where it came from, same-origin.
 */
function checkCsrf(req: IncomingMessage, route: Route, credential: Credential | undefined): void {
  if (credential?.source !== "cookie" || route.verb === "GET") return;
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/json") {
    throw new RpcError(Code.PERMISSION_DENIED, "cookie-authenticated writes must send Content-Type: application/json", {
      reason: "CSRF_CONTENT_TYPE",
    });
  }
  const origin = req.headers.origin;
  if (origin && origin !== "null") {
    let host: string | undefined;
    try {
      host = new URL(origin).host;
    } catch {
      host = undefined;
    }
    if (host !== req.headers.host) {
      throw new RpcError(Code.PERMISSION_DENIED, "cross-origin cookie-authenticated write refused", {
        reason: "CSRF_ORIGIN",
      });
    }
  }
}

async function readJsonBody(req: IncomingMessage): Promise<JsonValue | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_JSON_BODY_BYTES) {
      throw new RpcError(Code.INVALID_ARGUMENT, `request body exceeds ${MAX_JSON_BODY_BYTES} bytes`, {
        reason: "BODY_TOO_LARGE",
      });
    }
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8");
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

function incomingCall(req: IncomingMessage, res: ServerResponse, credential: Credential | undefined): IncomingCall {
  const controller = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) controller.abort(new Error("client disconnected"));
  });
  const requestId = req.headers["x-request-id"];
  return {
    transport: "http",
    credential,
    signal: controller.signal,
    deadline: undefined,
    requestId: typeof requestId === "string" ? requestId : undefined,
  };
}
