import { status as Code } from "@grpc/grpc-js";
import { Any } from "../../gen/google/protobuf/any.js";
import { BadRequest, ErrorInfo } from "../../gen/google/rpc/error_details.js";
import { Status } from "../../gen/google/rpc/status.js";

export { Code };

/** The domain of every google.rpc.ErrorInfo this service emits. */
export const ERROR_DOMAIN = "atrium";

export interface FieldViolation {
  /** Path of the field in the request, proto names joined by dots (`namespace.name`, `items[2].url`). */
  field: string;
  description: string;
}

export interface RpcErrorOptions {
  /** Stable, UPPER_SNAKE machine-readable cause, sent as ErrorInfo.reason. */
  reason?: string;
  fieldViolations?: FieldViolation[];
  /** Extra ErrorInfo metadata (e.g. a request id, a shortfall). */
  metadata?: Record<string, string>;
}

/**
 * An error meant for the caller: a gRPC status code, a message, and rich details. Anything thrown
 * that is not an RpcError is an internal error and is never shown to the caller.
 */
export class RpcError extends Error {
  readonly code: Code;
  readonly reason: string;
  readonly fieldViolations: readonly FieldViolation[];
  readonly metadata: Readonly<Record<string, string>>;

  constructor(code: Code, message: string, options: RpcErrorOptions = {}) {
    super(bounded(message, MAX_MESSAGE_CHARS));
    this.name = "RpcError";
    this.code = code;
    this.reason = options.reason ?? Code[code];
    this.fieldViolations = (options.fieldViolations ?? []).slice(0, MAX_VIOLATIONS).map(({ field, description }) => ({
      field: bounded(field, MAX_FIELD_CHARS),
      description: bounded(description, MAX_MESSAGE_CHARS),
    }));
    this.metadata = options.metadata ?? {};
  }

  /** google.rpc.Status with BadRequest (when there are field violations) and ErrorInfo details. */
  toStatus(): Status {
    const details: Any[] = [];
    if (this.fieldViolations.length > 0) {
      const badRequest = BadRequest.fromPartial({ fieldViolations: [...this.fieldViolations] });
      details.push({ typeUrl: typeUrl("google.rpc.BadRequest"), value: Buffer.from(BadRequest.encode(badRequest).finish()) });
    }
    const info = ErrorInfo.fromPartial({ reason: this.reason, domain: ERROR_DOMAIN, metadata: { ...this.metadata } });
    details.push({ typeUrl: typeUrl("google.rpc.ErrorInfo"), value: Buffer.from(ErrorInfo.encode(info).finish()) });
    return { code: this.code, message: this.message, details };
  }
}

/**
 * Messages often quote what the caller sent (a name, an id); a 100,000-character id must not come
 * back whole, nor swell the gRPC trailers.
 */
const MAX_MESSAGE_CHARS = 1024;
const MAX_FIELD_CHARS = 256;
/**
 * Field violations sent with one error: HTTP/2 peers refuse trailers past 64 KiB (Node's default), and
 * a request with 20,000 bad values would otherwise go unanswered.
 */
const MAX_VIOLATIONS = 20;

/**
 * Also well-formed: grpc-js percent-encodes the message into the grpc-message trailer, which throws on a
 * lone surrogate (as cutting a pair in two would leave) and leaves the call unanswered.
 */
function bounded(text: string, max: number): string {
  if (text.length <= max) return text.toWellFormed();
  let end = max - 1;
  if (/[\ud800-\udbff]/.test(text[end - 1]!)) end--;
  return `${text.slice(0, end)}…`.toWellFormed();
}

function typeUrl(typeName: string): string {
  return `type.googleapis.com/${typeName}`;
}

/** INVALID_ARGUMENT naming every bad field; the message lists them so plain clients see them too. */
export function invalidArgument(violations: FieldViolation[], reason = "INVALID_ARGUMENT"): RpcError {
  const more = violations.length - MAX_VIOLATIONS;
  const suffix = more > 0 ? `; and ${more} more` : "";
  const listed = violations.slice(0, MAX_VIOLATIONS).map((v) => `${v.field}: ${v.description}`);
  const message = bounded(listed.join("; "), MAX_MESSAGE_CHARS - suffix.length) + suffix;
  return new RpcError(Code.INVALID_ARGUMENT, message, { reason, fieldViolations: violations });
}

/** What the caller sees of a fault that is not theirs: the request id, to quote when reporting it. */
export function internalError(requestId: string): RpcError {
  return new RpcError(Code.INTERNAL, `internal error (request id ${requestId})`, {
    reason: "INTERNAL",
    metadata: { request_id: requestId },
  });
}

export function notFound(what: string, reason = "NOT_FOUND"): RpcError {
  return new RpcError(Code.NOT_FOUND, `${what} not found`, { reason });
}

export function alreadyExists(what: string, reason = "ALREADY_EXISTS"): RpcError {
  return new RpcError(Code.ALREADY_EXISTS, `${what} already exists`, { reason });
}

export function permissionDenied(message: string, reason = "PERMISSION_DENIED"): RpcError {
  return new RpcError(Code.PERMISSION_DENIED, message, { reason });
}

export function failedPrecondition(message: string, reason: string, fieldViolations?: FieldViolation[]): RpcError {
  return new RpcError(Code.FAILED_PRECONDITION, message, { reason, fieldViolations });
}

export function unauthenticated(message: string, reason = "UNAUTHENTICATED"): RpcError {
  return new RpcError(Code.UNAUTHENTICATED, message, { reason });
}

/** Collects field violations while validating a request, then throws them all at once. */
export class Violations {
  private readonly list: FieldViolation[] = [];

  add(field: string, description: string): void {
    this.list.push({ field, description });
  }

  get isEmpty(): boolean {
    return this.list.length === 0;
  }

  throwIfAny(reason?: string): void {
    if (this.list.length > 0) throw invalidArgument(this.list, reason);
  }
}

/**
 * `value` when it is one of `choices` (a list, a set, or a record keyed by every member of a value set,
 * which the compiler checks is complete); otherwise names `field` in `violations` with the choices,
 * followed by `qualifier` when the choices depend on another field ("for video").
 */
export function oneOf<K extends string>(
  violations: Violations,
  field: string,
  value: string,
  choices: Iterable<K> | Record<K, unknown>,
  qualifier?: string,
): K | undefined {
  const names: string[] = Symbol.iterator in choices ? [...choices] : Object.keys(choices);
  if (names.includes(value)) return value as K;
  violations.add(field, `must be one of ${names.join(", ")}${qualifier === undefined ? "" : ` ${qualifier}`}`);
  return undefined;
}

/** How a stream stopped by `signal` ends: the RpcError it was aborted with (a shutdown), else CANCELLED. */
export function cancellation(signal: AbortSignal): RpcError {
  return signal.reason instanceof RpcError ? signal.reason : new RpcError(Code.CANCELLED, "the call was cancelled");
}
