import { FaceDetectionServiceService } from "../../gen/faceswap/v1/face_detection_service.js";
import { FaceSwapServiceService } from "../../gen/faceswap/v1/face_swap_service.js";
import { FilesServiceService } from "../../gen/faceswap/v1/files_service.js";
import { VideoProjectsServiceService, type VideoProject } from "../../gen/faceswap/v1/video_projects_service.js";
import type { JobRow } from "../platform/db/schema.js";
import { defineService } from "../transport/call.js";
import type { FaceSwapService } from "./service.js";

/** Magic Hour's SDK validates every response key with `.nullable()`: unset fields must read `null`. */
const MAGIC_HOUR_JSON = { nullWhenUnset: true };

/** The four faceswap.v1 services over one FaceSwapService; every one needs the `faceswap` scope. */
export function faceSwapServices(faceSwap: FaceSwapService) {
  const project = async (row: JobRow) => toVideoProject(row, await faceSwap.downloadLinks(visibleOutputs(row)));
  return [
    defineService(FilesServiceService, "faceswap", {
      createUploadUrls: async (request, ctx) => ({ items: faceSwap.createUploadUrls(ctx.principal, request.items) }),
    }, MAGIC_HOUR_JSON),
    defineService(FaceSwapServiceService, "faceswap", {
      createFaceSwap: async (request, ctx) => {
        const created = await faceSwap.createFaceSwap(ctx.principal, request, ctx.signal);
        if (created.deprecationWarning) {
          ctx.setResponseHeader("deprecation", "true");
          ctx.setResponseHeader("warning", `299 - "${created.deprecationWarning}"`);
        }
        return { id: created.id, creditsCharged: created.credits, estimatedFrameCost: created.credits };
      },
    }, MAGIC_HOUR_JSON),
    defineService(VideoProjectsServiceService, "faceswap", {
      getVideoProject: async (request, ctx) => ({ project: await project(await faceSwap.getProject(ctx.principal, request.id)) }),
      listVideoProjects: async (request, ctx) => {
        const page = await faceSwap.listProjects(ctx.principal, request);
        return { projects: await Promise.all(page.rows.map(project)), nextPageToken: page.nextPageToken };
      },
      cancelVideoProject: async (request, ctx) => ({ project: await project(await faceSwap.cancelProject(ctx.principal, request.id)) }),
      deleteVideoProject: async (request, ctx) => {
        await faceSwap.deleteProject(ctx.principal, request.id);
        return {};
      },
    }, MAGIC_HOUR_JSON),
    defineService(FaceDetectionServiceService, "faceswap", {
      createFaceDetection: async (request, ctx) => ({
        id: await faceSwap.createFaceDetection(ctx.principal, request, ctx.signal),
        creditsCharged: 0,
      }),
      getFaceDetection: async (request, ctx) => {
        const row = await faceSwap.getFaceDetection(ctx.principal, request.id);
        const links = await faceSwap.downloadLinks(row.status === "complete" ? row.output_keys : []);
        return {
          id: row.id,
          status: row.status,
          creditsCharged: row.credits_charged,
          faces: row.output_keys.map((path, i) => ({ path, url: links[i]?.url ?? "" })),
          error: errorOf(row),
        };
      },
    }, MAGIC_HOUR_JSON),
  ];
}

function visibleOutputs(row: JobRow): string[] {
  return row.status === "complete" && row.enabled ? row.output_keys : [];
}

function toVideoProject(row: JobRow, downloads: { url: string; expiresAt: Date }[]): VideoProject {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    type: row.type,
    createdAt: row.created_at,
    width: row.width,
    height: row.height,
    enabled: row.enabled,
    startSeconds: row.start_seconds,
    endSeconds: row.end_seconds,
    creditsCharged: row.credits_charged,
    totalFrameCost: row.credits_charged,
    fps: row.fps,
    error: errorOf(row),
    downloads,
    download: downloads[0],
    framesRendered: row.frames_rendered,
    framesTotal: row.frames_total,
    startedAt: row.started_at ?? undefined,
    finishedAt: row.finished_at ?? undefined,
  };
}

function errorOf(row: JobRow) {
  return row.error_code === null ? undefined : { code: row.error_code, message: row.error_message ?? "" };
}
