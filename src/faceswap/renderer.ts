/**
 * What a render job needs and gives back. The job runner resolves blobs to local files, picks the output
 * size from the plan, and settles credits from `frames`; the renderer only turns inputs into a video.
 */
import type { FaceSwapMode, StyleVersion } from "../platform/db/schema.js";

export interface FaceMappingInput {
  /** Local path of an image of the face as it appears in the video (from face detection, or any upload). */
  originalFace: string;
  /** Local path of the image holding the replacement face. */
  newFace: string;
}

export interface RenderRequest {
  /** Local path of the source video. */
  video: string;
  /** Clip range in the source, seconds; `endSeconds` is already clipped to the video's duration. */
  startSeconds: number;
  endSeconds: number;
  /** Output frame size: min(source, plan cap) on the long side, both even. */
  width: number;
  height: number;
  /** Output frame rate: the source's. */
  fps: number;
  /** Whether the source has an audio stream to trim and keep. */
  hasAudio: boolean;
  mode: FaceSwapMode;
  /** Local path of the new face image (all-faces). */
  face: string | undefined;
  /** individual-faces mappings, local paths. */
  mappings: FaceMappingInput[];
  style: StyleVersion;
  /** Local path the H.264 MP4 is written to. */
  output: string;
  /** Aborted on cancel or shutdown; the renderer stops within a second and rejects. */
  signal: AbortSignal;
  /** Called as frames are written (not more than a few times a second). */
  onProgress?: (framesRendered: number, framesExpected: number) => void;
}

export interface RenderResult {
  /** Frames written to the output; credits are settled to this. */
  frames: number;
}

/** A failure the job's owner should see as the project's `error.code` (not a crash of the service). */
export class RenderError extends Error {
  constructor(
    /** Stable snake_case code, e.g. `no_face_in_source`, `decode_failed`. */
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "RenderError";
  }
}

export interface Renderer {
  /** Starts workers and loads models ahead of the first job (which would otherwise wait for them). */
  prepare(): Promise<void>;
  render(request: RenderRequest): Promise<RenderResult>;
  /** Releases workers and models. */
  close(): Promise<void>;
}

export interface DetectedFace {
  /** Frame index in the source the crop was taken from (0 for an image). */
  frame: number;
  /** Position of the face left to right within that frame. */
  index: number;
  /** Local path of the cropped face PNG written by the detector. */
  png: string;
}

export interface FaceDetectionRequest {
  /** Local path of a video or image. */
  input: string;
  still: boolean;
  /** Faces below this detection confidence (0..1) are ignored. */
  confidence: number;
  /** Directory the PNG crops are written to. */
  outputDirectory: string;
  signal: AbortSignal;
}

export interface FaceDetector {
  /** The distinct faces of the input (one per person, clustered by embedding across sampled frames). */
  detect(request: FaceDetectionRequest): Promise<DetectedFace[]>;
}
