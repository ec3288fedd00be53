import { createRequire } from "node:module";
import path from "node:path";
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  FileDescriptorProtoSchema,
  type FileDescriptorProto,
} from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { protoPath as healthProtoPath } from "grpc-health-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";

const require = createRequire(import.meta.url);
const reflectionProtoDir = path.join(path.dirname(require.resolve("@grpc/reflection")), "..", "proto");
const loaderOptions: protoLoader.Options = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };

type Constructor = new (address: string, credentials: grpc.ChannelCredentials) => grpc.Client;

function serviceConstructor(protoFile: string, includeDir: string, serviceName: string): Constructor {
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync(protoFile, { ...loaderOptions, includeDirs: [includeDir] }));
  let node: unknown = loaded;
  for (const part of serviceName.split(".")) node = (node as Record<string, unknown>)[part];
  if (typeof node !== "function") throw new Error(`${serviceName} not found in ${protoFile}`);
  return node as Constructor;
}

const REFLECTION = {
  v1: serviceConstructor(
    path.join(reflectionProtoDir, "grpc/reflection/v1/reflection.proto"),
    reflectionProtoDir,
    "grpc.reflection.v1.ServerReflection",
  ),
  v1alpha: serviceConstructor(
    path.join(reflectionProtoDir, "grpc/reflection/v1alpha/reflection.proto"),
    reflectionProtoDir,
    "grpc.reflection.v1alpha.ServerReflection",
  ),
};
const Health = serviceConstructor(healthProtoPath, path.dirname(path.dirname(path.dirname(healthProtoPath))), "grpc.health.v1.Health");

interface ReflectionResponse {
  message_response?: string;
  list_services_response?: { service: { name: string }[] };
  file_descriptor_response?: { file_descriptor_proto: Buffer[] };
  error_response?: { error_code: number; error_message: string };
}

/** One request on a ServerReflectionInfo stream, answered by one response. */
function reflect(version: keyof typeof REFLECTION, address: string, request: object): Promise<ReflectionResponse> {
  const client = new REFLECTION[version](address, grpc.credentials.createInsecure());
  return new Promise<ReflectionResponse>((resolve, reject) => {
    const stream = (client as unknown as { ServerReflectionInfo(): grpc.ClientDuplexStream<object, ReflectionResponse> })
      .ServerReflectionInfo();
    stream.on("data", (response: ReflectionResponse) => {
      resolve(response);
      stream.end();
    });
    stream.on("error", reject);
    stream.on("end", () => reject(new Error("stream ended without a response")));
    stream.write({ host: "", ...request });
  }).finally(() => client.close());
}

type HealthClient = grpc.Client & {
  Check(
    request: { service: string },
    options: grpc.CallOptions,
    callback: (error: grpc.ServiceError | null, response?: { status: string }) => void,
  ): void;
  Watch(request: { service: string }): grpc.ClientReadableStream<{ status: string }>;
};

function healthClient(address: string): HealthClient {
  return new Health(address, grpc.credentials.createInsecure()) as HealthClient;
}

function check(client: HealthClient, service: string): Promise<string> {
  return new Promise((resolve, reject) =>
    client.Check({ service }, { deadline: Date.now() + 5_000 }, (error, response) =>
      error ? reject(error) : resolve(response!.status),
    ),
  );
}

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
});
afterAll(async () => {
  await t?.stop();
});

describe("server reflection", () => {
  it.each(["v1", "v1alpha"] as const)("lists every service on %s", async (version) => {
    const response = await reflect(version, t.grpcAddress, { list_services: "" });
    const names = response.list_services_response!.service.map((s) => s.name);
    expect(names).toEqual(
      expect.arrayContaining([
        "v1.NamespaceService",
        "auth.v1.AdminService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
      ]),
    );
    expect(new Set(names).size).toBe(names.length);
  });

  it("answers an unknown symbol with NOT_FOUND", async () => {
    const response = await reflect("v1", t.grpcAddress, { file_containing_symbol: "v1.NoSuchThing" });
    expect(response.error_response?.error_code).toBe(grpc.status.NOT_FOUND);
  });

  describe("v1.Namespace descriptor", () => {
    let files: FileDescriptorProto[];

    beforeAll(async () => {
      const response = await reflect("v1", t.grpcAddress, { file_containing_symbol: "v1.Namespace" });
      const raw = response.file_descriptor_response!.file_descriptor_proto;
      expect(raw.length).toBeGreaterThan(0);
      files = raw.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
    });

    const namespaceMessage = () => {
      const file = files.find((f) => f.package === "v1" && f.messageType.some((m) => m.name === "Namespace"));
      expect(file, "a v1 file declaring Namespace").toBeDefined();
      expect(file!.syntax).toBe("proto3");
      return { file: file!, message: file!.messageType.find((m) => m.name === "Namespace")! };
    };

    it("includes the file declaring it and its wrappers dependency", () => {
      const { file } = namespaceMessage();
      expect(file.dependency).toContain("google/protobuf/wrappers.proto");
      // v1alpha serves the same descriptors.
      expect(files.map((f) => f.name)).toContain(file.name);
    });

    it("has the 19 fields, tags, types and snake_case JSON names that registry clients are built against", () => {
      const { message } = namespaceMessage();
      const S = ".google.protobuf.StringValue";
      const U = ".google.protobuf.UInt32Value";
      const B = ".google.protobuf.BoolValue";
      const expected: [string, number, string, boolean][] = [
        ["name", 1, S, false],
        ["comment", 2, S, false],
        ["owners", 3, S, false],
        ["token", 4, S, false],
        ["ctime", 5, S, false],
        ["mtime", 6, S, false],
        ["total_service_count", 7, U, false],
        ["total_health_instance_count", 8, U, false],
        ["total_instance_count", 9, U, false],
        ["user_ids", 10, S, true],
        ["group_ids", 11, S, true],
        ["id", 12, S, false],
        ["remove_user_ids", 13, S, true],
        ["remove_group_ids", 14, S, true],
        ["editable", 15, B, false],
        ["service_export_to", 16, S, true],
        ["deleteable", 100, B, false],
      ];
      expect(message.field).toHaveLength(19);
      expect(message.oneofDecl).toEqual([]);
      for (const [name, number, typeName, repeated] of expected) {
        const field = message.field.find((f) => f.name === name);
        expect(field, name).toBeDefined();
        expect({ name, number: field!.number, type: field!.type, typeName: field!.typeName }).toEqual({
          name,
          number,
          type: Type.MESSAGE,
          typeName,
        });
        expect(field!.label, name).toBe(repeated ? Label.REPEATED : Label.OPTIONAL);
        expect(field!.proto3Optional, name).toBe(false);
      }
      for (const field of message.field) expect(field.jsonName, field.name).toBe(field.name);

      const sync = message.field.find((f) => f.name === "sync_to_global_registry")!;
      expect(sync).toMatchObject({ number: 18, type: Type.BOOL, label: Label.OPTIONAL, proto3Optional: false });
      expect(sync.typeName).toBe("");

      const metadata = message.field.find((f) => f.name === "metadata")!;
      expect(metadata).toMatchObject({ number: 17, type: Type.MESSAGE, label: Label.REPEATED });
      const entryName = metadata.typeName.split(".").pop()!;
      expect(metadata.typeName).toBe(`.v1.Namespace.${entryName}`);
      const entry = message.nestedType.find((m) => m.name === entryName)!;
      expect(entry.options?.mapEntry).toBe(true);
      expect(entry.field.map((f) => [f.name, f.number, f.type])).toEqual([
        ["key", 1, Type.STRING],
        ["value", 2, Type.STRING],
      ]);
    });
  });

  it("serves the same Namespace descriptor on v1alpha", async () => {
    const response = await reflect("v1alpha", t.grpcAddress, { file_containing_symbol: "v1.Namespace" });
    const files = response.file_descriptor_response!.file_descriptor_proto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
    const message = files.flatMap((f) => (f.package === "v1" ? f.messageType : [])).find((m) => m.name === "Namespace");
    expect(message?.field.map((f) => f.number).sort((a, b) => a - b)).toEqual([...Array.from({ length: 18 }, (_, i) => i + 1), 100]);
  });

  it.each([
    "v1.NamespaceService",
    "auth.v1.AdminService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
  ])(
    "lets a client resolve %s and every type it uses, fetching imports by file name as grpcurl does",
    async (serviceName) => {
      const decode = (response: ReflectionResponse) => {
        expect(response.error_response).toBeUndefined();
        return response.file_descriptor_response!.file_descriptor_proto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
      };
      const [root] = decode(await reflect("v1", t.grpcAddress, { file_containing_symbol: serviceName }));
      const byName = new Map<string, FileDescriptorProto>([[root!.name, root!]]);
      const pending = [...root!.dependency];
      while (pending.length > 0) {
        const name = pending.pop()!;
        if (byName.has(name)) continue;
        const [file] = decode(await reflect("v1", t.grpcAddress, { file_by_filename: name }));
        expect(file!.name).toBe(name);
        byName.set(name, file!);
        pending.push(...file!.dependency);
      }
      // Linking fails on any type reference that the fetched files do not define.
      const registry = createFileRegistry(root!, (name) => byName.get(name));
      const service = registry.getService(serviceName)!;
      expect(service).toBeDefined();
      for (const method of service.methods) {
        expect(method.input.typeName).not.toBe("");
        expect(method.output.typeName).not.toBe("");
      }
    },
  );

  it("describes the health service", async () => {
    const response = await reflect("v1", t.grpcAddress, { file_containing_symbol: "grpc.health.v1.Health" });
    const files = response.file_descriptor_response!.file_descriptor_proto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
    const service = files.flatMap((f) => (f.package === "grpc.health.v1" ? f.service : [])).find((s) => s.name === "Health");
    expect(service?.method.map((m) => m.name)).toEqual(expect.arrayContaining(["Check", "Watch"]));
  });

  it("describes the services' methods", async () => {
    const response = await reflect("v1", t.grpcAddress, { file_containing_symbol: "auth.v1.AdminService" });
    const files = response.file_descriptor_response!.file_descriptor_proto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
    const service = files.flatMap((f) => (f.package === "auth.v1" ? f.service : [])).find((s) => s.name === "AdminService");
    expect(service?.method.map((m) => m.name)).toEqual([
      "CreateAccount",
      "ListAccounts",
      "CreateApiKey",
      "ListApiKeys",
      "RevokeApiKey",
      "SetAccountPlan",
      "GrantCredits",
    ]);
  });
});

describe("health", () => {
  it("is SERVING for the server and each service, NOT_FOUND for unknown ones", async () => {
    const client = healthClient(t.grpcAddress);
    try {
      expect(await check(client, "")).toBe("SERVING");
      expect(await check(client, "v1.NamespaceService")).toBe("SERVING");
      expect(await check(client, "auth.v1.AdminService")).toBe("SERVING");
      const error = await check(client, "no.Such").then(
        () => undefined,
        (e: grpc.ServiceError) => e,
      );
      expect(error?.code).toBe(grpc.status.NOT_FOUND);
    } finally {
      client.close();
    }
  });

  it("needs no API key", async () => {
    // The health client above sends no authorization metadata; a namespace call without one fails.
    const client = healthClient(t.grpcAddress);
    try {
      expect(await check(client, "")).toBe("SERVING");
    } finally {
      client.close();
    }
  });

  it("reports NOT_SERVING to watchers while stopping, then refuses new calls", async () => {
    const own = await startTestApp(await createTestDatabase());
    const client = healthClient(own.grpcAddress);
    const seen: string[] = [];
    const watch = client.Watch({ service: "v1.NamespaceService" });
    const watchEnded = new Promise<void>((resolve) => {
      watch.on("error", () => resolve());
      watch.on("end", () => resolve());
    });
    watch.on("data", (message: { status: string }) => seen.push(message.status));
    try {
      await expect.poll(() => seen).toEqual(["SERVING"]);
      expect(await check(client, "")).toBe("SERVING");

      const started = Date.now();
      const stopped = own.stop();
      await expect.poll(() => seen).toEqual(["SERVING", "NOT_SERVING"]);
      // The server ends the open Watch stream itself once no call is in flight, so the stream does
      // not hold shutdown up for the whole grace period.
      await watchEnded;
      await stopped;
      expect(Date.now() - started).toBeLessThan(1_000);

      const after = healthClient(own.grpcAddress);
      try {
        const error = await new Promise<grpc.ServiceError | undefined>((resolve) =>
          after.Check({ service: "" }, { deadline: Date.now() + 2_000 }, (e) => resolve(e ?? undefined)),
        );
        expect(error?.code).toBe(grpc.status.UNAVAILABLE);
      } finally {
        after.close();
      }
    } finally {
      watch.cancel();
      client.close();
      await own.stop();
    }
  });
});
