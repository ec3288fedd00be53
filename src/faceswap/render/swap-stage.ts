import type { FaceSwapMode } from "../../platform/db/schema.js";
import type { FrameStage } from "./pipeline.js";
import type { FaceData, SwapTarget } from "./protocol.js";
import type { StyleParams } from "./swap.js";
import { FaceTracker, iou, type Track } from "./tracker.js";
import type { WorkerPool } from "./worker-pool.js";

export interface SwapPlan {
  /** Keys the frames and sources the workers hold for this render. */
  job: number;
  mode: FaceSwapMode;
  /** individual-faces: embedding of the person source i replaces. */
  originals: number[][];
  style: StyleParams;
  width: number;
  height: number;
  fps: number;
}

/**
 * Similarity (human.match.similarity, 0..1) from which two faces count as the same person: different
 * people in the demo photos score up to 0.57.
 */
const MATCH_THRESHOLD = 0.65;

/** Index of the candidate embedding that is the same person as `embedding` (the most similar one), or -1. */
export async function matchPerson(pool: WorkerPool, worker: number, embedding: number[], candidates: number[][]): Promise<number> {
  const similarities = await pool.call<number[]>(worker, { type: "similarities", embedding, candidates });
  const best = similarities.reduce((b, s, i) => (s > (similarities[b] ?? -1) ? i : b), -1);
  return best >= 0 && similarities[best]! >= MATCH_THRESHOLD ? best : -1;
}

/**
 * Frame i goes to worker i mod N, which detects faces in it and keeps it. Tracking runs here, one
 * frame after another in order (it needs the previous frame's tracks); then the same worker draws the
 * frame's targets and hands it back. Detection of later frames overlaps with all of this.
 */
export class SwapStage implements FrameStage {
  readonly window: number;
  private readonly tracker: FaceTracker;
  private previous: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly pool: WorkerPool,
    private readonly plan: SwapPlan,
  ) {
    this.window = pool.size * 3;
    this.tracker = new FaceTracker(plan.fps);
  }

  process(frame: Buffer, index: number): Promise<Buffer> {
    const { job, width, height } = this.plan;
    const worker = index % this.pool.size;
    const pixels = ownArrayBuffer(frame);
    const detected = this.pool.call<FaceData[]>(worker, { type: "detect", job, frame: index, pixels, width, height }, [pixels]);
    const targets = Promise.all([detected, this.previous]).then(([faces]) => this.targets(worker, index, faces));
    this.previous = targets;
    targets.catch(() => {});
    return targets
      .then((list) => this.pool.call<ArrayBuffer>(worker, { type: "finish", job, frame: index, targets: list, style: this.plan.style }))
      .then((buffer) => Buffer.from(buffer));
  }

  /** Drops whatever the workers still hold for this render. */
  async end(): Promise<void> {
    await this.pool.broadcast({ type: "end", job: this.plan.job }).catch(() => {});
  }

  private async targets(worker: number, index: number, faces: FaceData[]): Promise<SwapTarget[]> {
    const tracks = this.tracker.update(index, faces);
    if (this.plan.mode === "all-faces") return tracks.map((track) => ({ source: 0, mesh: track.mesh, depth: track.depth, neutral: track.shape.neutral }));
    const unknown = tracks.filter((track) => track.source === undefined && track.describeAt <= index);
    if (unknown.length > 0) await this.identify(worker, index, unknown);
    return tracks.flatMap((track) => (track.source !== undefined && track.source >= 0 ? [{ source: track.source, mesh: track.mesh, depth: track.depth, neutral: track.shape.neutral }] : []));
  }

  /**
   * Embeds the faces of new tracks (once per track, not per frame) and picks the mapping whose
   * original is most similar. A face that matches none is retried a second later (a better angle),
   * and left untouched meanwhile.
   */
  private async identify(worker: number, index: number, tracks: Track[]): Promise<void> {
    const described = await this.pool.call<FaceData[]>(worker, { type: "describe", job: this.plan.job, frame: index });
    for (const track of tracks) {
      track.describeAt = index + Math.max(1, Math.round(this.plan.fps));
      const face = described
        .filter((candidate) => candidate.embedding && iou(candidate.box, track.box) >= 0.3)
        .sort((a, b) => iou(b.box, track.box) - iou(a.box, track.box))[0];
      if (!face?.embedding) continue;
      const match = await matchPerson(this.pool, worker, face.embedding, this.plan.originals);
      if (match >= 0) track.source = match;
    }
  }
}

function ownArrayBuffer(frame: Buffer): ArrayBuffer {
  if (frame.byteOffset === 0 && frame.byteLength === frame.buffer.byteLength) return frame.buffer as ArrayBuffer;
  return frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer;
}
