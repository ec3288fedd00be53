import * as accountMessages from "../../gen/auth/v1/account_service.js";
import { AccountServiceService } from "../../gen/auth/v1/account_service.js";
import * as adminMessages from "../../gen/auth/v1/admin_service.js";
import { AdminServiceService } from "../../gen/auth/v1/admin_service.js";
import * as faceDetectionMessages from "../../gen/faceswap/v1/face_detection_service.js";
import { FaceDetectionServiceService } from "../../gen/faceswap/v1/face_detection_service.js";
import * as faceSwapMessages from "../../gen/faceswap/v1/face_swap_service.js";
import { FaceSwapServiceService } from "../../gen/faceswap/v1/face_swap_service.js";
import * as filesMessages from "../../gen/faceswap/v1/files_service.js";
import { FilesServiceService } from "../../gen/faceswap/v1/files_service.js";
import * as videoProjectMessages from "../../gen/faceswap/v1/video_projects_service.js";
import { VideoProjectsServiceService } from "../../gen/faceswap/v1/video_projects_service.js";
import * as namespaceMessages from "../../gen/v1/namespace_service.js";
import { NamespaceServiceService } from "../../gen/v1/namespace_service.js";
import * as registryMessages from "../../gen/v1/registry_service.js";
import { RegistryServiceService } from "../../gen/v1/registry_service.js";
import * as webhookMessages from "../../gen/webhook/v1/webhook_service.js";
import { WebhookServiceService } from "../../gen/webhook/v1/webhook_service.js";
import { generate, type FaceSwapGenerateRequest, type GenerateOptions, type GenerateResult } from "./generate.js";
import { promiseClient, type ConnectOptions, type PromiseClient } from "./grpc.js";

export { ApiError, Code } from "./errors.js";
export { verifySignature as verifyWebhookSignature } from "../webhooks/signature.js";
export type { CallSettings, ConnectOptions, PromiseClient, ResponseStream } from "./grpc.js";
export {
  downloadProjectOutputs,
  FaceSwapInputError,
  FaceSwapJobError,
  generate as generateFaceSwap,
  TransferError,
} from "./generate.js";
export type { DownloadOptions, FaceSwapGenerateRequest, GenerateOptions, GenerateProgress, GenerateResult, VideoProject } from "./generate.js";

export interface AtriumClient {
  namespaces: PromiseClient<typeof NamespaceServiceService>;
  registry: PromiseClient<typeof RegistryServiceService>;
  webhooks: PromiseClient<typeof WebhookServiceService>;
  admin: PromiseClient<typeof AdminServiceService>;
  account: PromiseClient<typeof AccountServiceService>;
  files: PromiseClient<typeof FilesServiceService>;
  faceSwap: PromiseClient<typeof FaceSwapServiceService> & {
    /** Upload local inputs, create, wait and download: see generateFaceSwap. */
    generate(request: FaceSwapGenerateRequest, options?: GenerateOptions): Promise<GenerateResult>;
  };
  videoProjects: PromiseClient<typeof VideoProjectsServiceService>;
  faceDetection: PromiseClient<typeof FaceDetectionServiceService>;
  close(): void;
}

/** Typed promise clients for every service, over one address and API key. */
export function createClient(options: ConnectOptions): AtriumClient {
  const namespaces = promiseClient(NamespaceServiceService, namespaceMessages, options);
  const registry = promiseClient(RegistryServiceService, registryMessages, options);
  const webhooks = promiseClient(WebhookServiceService, webhookMessages, options);
  const admin = promiseClient(AdminServiceService, adminMessages, options);
  const account = promiseClient(AccountServiceService, accountMessages, options);
  const files = promiseClient(FilesServiceService, filesMessages, options);
  const faceSwapCalls = promiseClient(FaceSwapServiceService, faceSwapMessages, options);
  const videoProjects = promiseClient(VideoProjectsServiceService, videoProjectMessages, options);
  const faceDetection = promiseClient(FaceDetectionServiceService, faceDetectionMessages, options);
  const faceSwap = Object.assign(faceSwapCalls, {
    generate: (request: FaceSwapGenerateRequest, generateOptions?: GenerateOptions) =>
      generate({ files, faceSwap, videoProjects }, request, generateOptions),
  });
  const all = [namespaces, registry, webhooks, admin, account, files, faceSwap, videoProjects, faceDetection];
  return {
    namespaces,
    registry,
    webhooks,
    admin,
    account,
    files,
    faceSwap,
    videoProjects,
    faceDetection,
    close: () => {
      for (const client of all) client.close();
    },
  };
}
