import type { ServerResponse } from "node:http";
import { fromBinary, toJson } from "@bufbuild/protobuf";
import { Status } from "../../../gen/google/rpc/status.js";
import { Code, type RpcError } from "../../platform/errors.js";
import { registry } from "../descriptors.js";

/** grpc-gateway's mapping from gRPC status codes to HTTP statuses. */
export function httpStatusOf(code: Code): number {
  switch (code) {
    case Code.OK:
      return 200;
    case Code.CANCELLED:
      return 499;
    case Code.INVALID_ARGUMENT:
    case Code.FAILED_PRECONDITION:
    case Code.OUT_OF_RANGE:
      return 400;
    case Code.DEADLINE_EXCEEDED:
      return 504;
    case Code.NOT_FOUND:
      return 404;
    case Code.ALREADY_EXISTS:
    case Code.ABORTED:
      return 409;
    case Code.PERMISSION_DENIED:
      return 403;
    case Code.UNAUTHENTICATED:
      return 401;
    case Code.RESOURCE_EXHAUSTED:
      return 429;
    case Code.UNIMPLEMENTED:
      return 501;
    case Code.UNAVAILABLE:
      return 503;
    default:
      return 500;
  }
}

const statusDesc = registry.getMessage("google.rpc.Status")!;

/** `{"code", "message", "details"}`: google.rpc.Status in proto JSON, details with their `@type`. */
export function errorBody(error: RpcError): unknown {
  const bytes = Status.encode(error.toStatus()).finish();
  return toJson(statusDesc, fromBinary(statusDesc, bytes), { useProtoFieldName: true, registry });
}

export function writeJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    "cache-control": "no-store",
  });
  res.end(text);
}

export function writeRpcError(
  res: ServerResponse,
  error: RpcError,
  headers: Record<string, string> = {},
  httpStatus = httpStatusOf(error.code),
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  writeJson(res, httpStatus, errorBody(error), headers);
}
