import { fromJson, toBinary, type DescMessage } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HeartbeatRequest, ListInstancesRequest, RegisterInstanceRequest } from "../gen/v1/registry_service.js";
import { CreateApiKeyRequest } from "../gen/auth/v1/admin_service.js";
import { GetNamespaceRequest } from "../gen/v1/namespace_service.js";
import { registry } from "../src/transport/descriptors.js";
import { checkRequest } from "../src/transport/request-decoder.js";
import { passesWireScan } from "../src/transport/wire-scan.js";
import { binaryMessage, brokenBytes } from "./support/hostile.js";

const SEED = Number(process.env.FUZZ_SEED ?? 20_261_123);
const OUR_PACKAGES = ["v1", "auth.v1", "webhook.v1", "faceswap.v1"];

const inputs: DescMessage[] = [];
for (const file of registry.files) {
  if (!OUR_PACKAGES.includes(file.proto.package)) continue;
  for (const service of file.services) for (const method of service.methods) inputs.push(method.input);
}

function fullCheckPasses(desc: DescMessage, bytes: Uint8Array): boolean {
  try {
    checkRequest(desc, bytes);
    return true;
  } catch {
    return false;
  }
}

describe("the wire scan", () => {
  it("passes nothing the full check refuses, for every request type, hostile contents and broken bytes", () => {
    let passed = 0;
    let refused = 0;
    for (const desc of inputs) {
      fc.assert(
        fc.property(fc.gen(), (g) => {
          const valid = toBinary(desc, binaryMessage(desc, g).message);
          const bytes = g(fc.integer, { min: 0, max: 3 }) === 0 ? brokenBytes(valid, g) : valid;
          const full = fullCheckPasses(desc, bytes);
          if (!full) refused++;
          if (passesWireScan(desc, bytes)) {
            passed++;
            expect(full, `${desc.typeName}: ${Buffer.from(bytes).toString("hex").slice(0, 400)}`).toBe(true);
          }
        }),
        { seed: SEED, numRuns: 200 },
      );
    }
    // The property means something only when both sides occur often.
    expect(passed).toBeGreaterThan(inputs.length * 20);
    expect(refused).toBeGreaterThan(inputs.length * 20);
  });

  it("proves the registry's and namespaces' everyday requests clean", () => {
    const cases: [string, Uint8Array][] = [
      ["v1.HeartbeatRequest", HeartbeatRequest.encode({ namespace: "prod", service: "api", instanceId: "0b7c2b9e-6f0e-4c55-9c52-2f1b2a3c4d5e" }).finish()],
      ["v1.GetNamespaceRequest", GetNamespaceRequest.encode({ name: "prod" }).finish()],
      [
        "v1.ListInstancesRequest",
        ListInstancesRequest.encode({ namespace: "prod", service: "api", healthyOnly: true, index: 2 ** 40, wait: undefined }).finish(),
      ],
      [
        "v1.RegisterInstanceRequest",
        RegisterInstanceRequest.encode({
          namespace: "prod",
          service: "api",
          host: "10.0.0.1",
          port: 8080,
          weight: 5,
          ttlSeconds: 30,
          metadata: { zone: "eu-west-1a", note: "ünïcode\ttab" },
        }).finish(),
      ],
    ];
    for (const [type, bytes] of cases) expect(passesWireScan(registry.getMessage(type)!, bytes), type).toBe(true);
  });

  it("leaves to the full check text with control characters or broken UTF-8, unsafe integers, timestamps and durations", () => {
    const heartbeat = registry.getMessage("v1.HeartbeatRequest")!;
    const nul = HeartbeatRequest.encode({ namespace: "a\u0000b", service: "api", instanceId: "x" }).finish();
    expect(passesWireScan(heartbeat, nul)).toBe(false);
    const badUtf8 = Buffer.from([0x0a, 0x02, 0xc3, 0x28]);
    expect(passesWireScan(heartbeat, badUtf8)).toBe(false);
    const list = registry.getMessage("v1.ListInstancesRequest")!;
    expect(passesWireScan(list, ListInstancesRequest.encode({ namespace: "a", service: "b", healthyOnly: false, index: 2 ** 53, wait: undefined }).finish())).toBe(false);
    expect(passesWireScan(list, ListInstancesRequest.encode({ namespace: "a", service: "b", healthyOnly: false, index: 2, wait: { seconds: 30, nanos: 0 } }).finish())).toBe(false);
    const createKey = registry.getMessage("auth.v1.CreateApiKeyRequest")!;
    const withExpiry = CreateApiKeyRequest.encode({ accountId: "a", name: "k", scopes: ["webhooks"], expireTime: new Date("2030-01-01T00:00:00Z") }).finish();
    expect(passesWireScan(createKey, withExpiry)).toBe(false);
    const register = registry.getMessage("v1.RegisterInstanceRequest")!;
    const protoKey = toBinary(register, fromJson(register, JSON.parse('{"namespace":"a","service":"b","metadata":{"__proto__":"x"}}')));
    expect(passesWireScan(register, protoKey)).toBe(false);
    const otherKey = toBinary(register, fromJson(register, JSON.parse('{"namespace":"a","service":"b","metadata":{"__proto_":"x"}}')));
    expect(passesWireScan(register, otherKey)).toBe(true);
  });
});
