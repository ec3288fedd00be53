import type { IncomingMessage, ServerResponse } from "node:http";
import { fromBinary, fromJson, toBinary, toJson, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import type { Credential } from "../../platform/auth.js";
import { jsonDepth } from "../../platform/json-depth.js";
import { Code, invalidArgument, RpcError } from "../../platform/errors.js";
import { requestIdOf, type IncomingCall } from "../call.js";
import { registry } from "../descriptors.js";
import { MAX_REQUEST_DEPTH } from "../request-decoder.js";
import type { Router } from "../router.js";
import { bindRequest, isObject } from "./binding.js";
import { JSON_READ, locateJsonError } from "./json-errors.js";
import { checkStrictJson } from "./json-strict.js";
import { BODY_TOO_LARGE, credentialOf, isSameOrigin, type RequestTarget } from "./request.js";
import { writeJson, writeRpcError } from "./responses.js";
import { buildRoutes, matchRoute, type Route } from "./routes.js";

/**
 * Serves every routed method that has a google.api.http rule as JSON over HTTP, through the same
 * handlers and interceptor chain as gRPC. JSON follows the proto3 mapping: input accepts proto and
 * JSON field names and ignores unknown fields; output uses proto (snake_case) names and includes
 * fields at their default values.
 */
export class Transcoder {
  private readonly routes: Route[];

  constructor(router: Router) {
    this.routes = buildRoutes(router);
  }

  /** Handles the request when a route matches its path; returns false otherwise. */
  async handle(
    req: IncomingMessage,
    res: ServerResponse,
    url: RequestTarget,
    requestId = requestIdOf(req.headers["x-request-id"]),
  ): Promise<boolean> {
    const match = matchRoute(this.routes, req.method ?? "GET", url.pathname);
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
      const json = await bindRequest(req, url, route, variables);
      const request = encodeRequest(route, json);
      const result = await route.method.invoke(request, incomingCall(res, credential, requestId), (response) => encodeResponse(route, response));
      Object.assign(headers, result.headers);
      writeJson(res, 200, result.response, headers);
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

}

/** The request's protobuf bytes; the Router decodes and checks them as it does a gRPC request's. */
function encodeRequest(route: Route, json: JsonObject): Uint8Array {
  const depth = jsonDepth(json, MAX_REQUEST_DEPTH);
  if (depth > MAX_REQUEST_DEPTH) {
    throw invalidArgument([{ field: "body", description: `nests deeper than ${MAX_REQUEST_DEPTH} levels` }], "INVALID_JSON");
  }
  checkStrictJson(route.input, json);
  let message;
  try {
    message = fromJson(route.input, json, JSON_READ);
  } catch (error) {
    const { field, problem } = locateJsonError(route.input, json, "") ?? { field: "body", problem: String(error) };
    throw invalidArgument([{ field, description: problem }], "INVALID_JSON");
  }
  return toBinary(route.input, message);
}


function encodeResponse(route: Route, response: unknown): JsonValue {
  const bytes = route.method.serialize(response);
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

function incomingCall(res: ServerResponse, credential: Credential | undefined, requestId: string): IncomingCall {
  const controller = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) controller.abort(new Error("client disconnected"));
  });
  return { transport: "http", credential, signal: controller.signal, deadline: undefined, requestId };
}
