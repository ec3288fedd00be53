import * as adminMessages from "../../gen/auth/v1/admin_service.js";
import { AdminServiceService } from "../../gen/auth/v1/admin_service.js";
import * as namespaceMessages from "../../gen/v1/namespace_service.js";
import { NamespaceServiceService } from "../../gen/v1/namespace_service.js";
import * as registryMessages from "../../gen/v1/registry_service.js";
import { RegistryServiceService } from "../../gen/v1/registry_service.js";
import * as webhookMessages from "../../gen/webhook/v1/webhook_service.js";
import { WebhookServiceService } from "../../gen/webhook/v1/webhook_service.js";
import { promiseClient, type ConnectOptions, type PromiseClient } from "./grpc.js";

export { ApiError, Code } from "./errors.js";
export { verifySignature as verifyWebhookSignature } from "../webhooks/signature.js";
export type { CallSettings, ConnectOptions, PromiseClient } from "./grpc.js";

export interface AtriumClient {
  namespaces: PromiseClient<typeof NamespaceServiceService>;
  registry: PromiseClient<typeof RegistryServiceService>;
  webhooks: PromiseClient<typeof WebhookServiceService>;
  admin: PromiseClient<typeof AdminServiceService>;
  close(): void;
}

/** Typed promise clients for every service, over one address and API key. */
export function createClient(options: ConnectOptions): AtriumClient {
  const namespaces = promiseClient(NamespaceServiceService, namespaceMessages, options);
  const registry = promiseClient(RegistryServiceService, registryMessages, options);
  const webhooks = promiseClient(WebhookServiceService, webhookMessages, options);
  const admin = promiseClient(AdminServiceService, adminMessages, options);
  return {
    namespaces,
    registry,
    webhooks,
    admin,
    close: () => {
      namespaces.close();
      registry.close();
      webhooks.close();
      admin.close();
    },
  };
}
