import { Metadata, status as Code, type ServiceError } from "@grpc/grpc-js";
import { BadRequest, ErrorInfo } from "../../gen/google/rpc/error_details.js";
import { Status } from "../../gen/google/rpc/status.js";

export { Code };

/** A failed call with the server's rich details decoded (google.rpc.BadRequest, ErrorInfo). */
export class ApiError extends Error {
  readonly code: Code;
  /** ErrorInfo.reason, e.g. NAMESPACE_EXISTS. */
  readonly reason: string | undefined;
  readonly fieldViolations: { field: string; description: string }[];
  readonly errorMetadata: Record<string, string>;
  readonly responseMetadata: Metadata;

  constructor(error: ServiceError) {
    super(error.details || error.message);
    this.name = "ApiError";
    this.code = error.code;
    this.responseMetadata = error.metadata ?? new Metadata();
    this.fieldViolations = [];
    this.errorMetadata = {};
    const raw = this.responseMetadata.get("grpc-status-details-bin")[0];
    if (raw instanceof Buffer) {
      for (const detail of Status.decode(raw).details) {
        if (detail.typeUrl.endsWith("/google.rpc.BadRequest")) {
          this.fieldViolations.push(
            ...BadRequest.decode(detail.value).fieldViolations.map((v) => ({ field: v.field, description: v.description })),
          );
        } else if (detail.typeUrl.endsWith("/google.rpc.ErrorInfo")) {
          const info = ErrorInfo.decode(detail.value);
          this.reason = info.reason;
          Object.assign(this.errorMetadata, info.metadata);
        }
      }
    }
  }

  /** The gRPC status name, e.g. INVALID_ARGUMENT. */
  get codeName(): string {
    return Code[this.code];
  }
}
