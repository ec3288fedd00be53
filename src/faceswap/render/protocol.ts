import type { SourceFace, StyleParams } from "./swap.js";

/**
 * A face as the worker reports it: box [x, y, width, height] and mesh (x, y pairs) in frame pixels,
 * with each point's depth (smaller is nearer the camera, same scale as x and y).
 */
export interface FaceData {
  box: [number, number, number, number];
  score: number;
  mesh: Float32Array;
  depth: Float32Array;
  embedding?: number[];
  /** How open its more closed eye is (see eyeOpenness), when `detect` or `analyse` asked for it with `eyes`; null when it could not be read. */
  eyes?: number | null;
}

export interface SwapTarget {
  /** Index into the job's source faces. */
  source: number;
  mesh: Float32Array;
  /** Depth of each mesh point (see FaceData). */
  depth: Float32Array;
  /** The face's mean shape over its track laid over `mesh` (the swap keeps the difference: expression). */
  neutral: Float32Array;
  /** How far the target's lids are lowered, 0 (open) to 1: that much of its eyes is drawn as the footage has them (see targetExpression). */
  lowered: number;
}

/**
 * Milliseconds one worker spent on each part of one render's frames: finding and meshing the faces,
 * reading how open their eyes are, searching for and following hands, and drawing the new faces.
 */
export interface StageTimes {
  faces: number;
  eyes: number;
  hands: number;
  /** Embedding faces to tell whose they are (individual-faces). */
  identify: number;
  draw: number;
}

export function noStageTimes(): StageTimes {
  return { faces: 0, eyes: 0, hands: 0, identify: 0, draw: 0 };
}

/** `a` and `b` added part by part. */
export function addStageTimes(a: StageTimes, b: StageTimes): StageTimes {
  return { faces: a.faces + b.faces, eyes: a.eyes + b.eyes, hands: a.hands + b.hands, identify: a.identify + b.identify, draw: a.draw + b.draw };
}

/** Requests to a render worker; each is answered once with the same `id`. */
export type WorkerRequest =
  /**
   * Keeps a frame until `finish`, finds the hands in it and, with `mesh` or on a new scene, its faces
   * (answered with FaceData[]; without, with null: see SwapStage), with `eyes` how open their eyes are.
   */
  | { type: "detect"; id: number; job: number; frame: number; pixels: ArrayBuffer; width: number; height: number; mesh: boolean; eyes: boolean }
  /** The faces, with embeddings, found in a crop around each of `boxes` ([x, y, width, height]) of a frame held since `detect`. */
  | { type: "describe"; id: number; job: number; frame: number; boxes: number[][] }
  /** Draws the targets onto a held frame and hands it back. */
  | { type: "finish"; id: number; job: number; frame: number; targets: SwapTarget[]; style: StyleParams }
  /**
   * Faces with embeddings in a still image (source faces, face detection); `upright`: rolled heads
   * meshed again from crops turned upright (see UprightMesher); embeddings stay unturned; `eyes`: with
   * how open their eyes are.
   */
  | { type: "analyse"; id: number; pixels: ArrayBuffer; width: number; height: number; minConfidence: number; upright: boolean; eyes: boolean; describe: boolean }
  | { type: "similarities"; id: number; embedding: number[]; candidates: number[][] }
  | { type: "sources"; id: number; job: number; sources: SourceFace[] }
  /**
   * Drops what the worker holds for a job (frames of a cancelled render, its sources); answered with
   * its StageTimes after the requests queued ahead of it. Of those, the job's own are answered with
   * the error RENDER_ENDED without being run: once a render ends, none of its frames are wanted.
   */
  | { type: "end"; id: number; job: number };

/** The error of a render's request that its end overtook (see `end`). */
export const RENDER_ENDED = "the render ended before this request was reached";

export type WorkerReply =
  | { type: "ready" }
  | { type: "result"; id: number; value: unknown }
  | { type: "error"; id: number; message: string };
