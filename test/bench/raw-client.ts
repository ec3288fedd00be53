import * as grpc from "@grpc/grpc-js";
import { CHANNEL_DEFAULTS } from "../../src/client/grpc.js";

/**
 * The lightest possible gRPC caller: requests go out pre-encoded and responses come back as bytes,
 * undecoded, so the load generator (which shares the machine's two cores with the server) spends
 * as little CPU per call as it can, the same for every scenario and the baseline. Its channel is
 * set up as the project's own client's is.
 */
export class RawClient {
  private readonly client: grpc.Client;
  private readonly metadata = new grpc.Metadata();

  constructor(address: string, token?: string) {
    this.client = new grpc.Client(address, grpc.credentials.createInsecure(), CHANNEL_DEFAULTS);
    if (token) this.metadata.set("authorization", `Bearer ${token}`);
  }

  call(path: string, request: Uint8Array): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(path, asBuffer, asIs, request, this.metadata, (error, response) =>
        error ? reject(error) : resolve(response!),
      );
    });
  }

  /** A server-streaming call whose messages arrive as bytes ('data' events); cancel() ends it. */
  stream(path: string, request: Uint8Array): grpc.ClientReadableStream<Buffer> {
    return this.client.makeServerStreamRequest(path, asBuffer, asIs, request, this.metadata);
  }

  close(): void {
    this.client.close();
  }
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function asIs(bytes: Buffer): Buffer {
  return bytes;
}
