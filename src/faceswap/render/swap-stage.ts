import type { FaceSwapMode } from "../../platform/db/schema.js";
import type { FrameStage } from "./pipeline.js";
import { facesBetween } from "./faces-between.js";
import { motionShares, motionSignature, samePicture } from "./frame-motion.js";
import { addStageTimes, type FaceData, type StageTimes, type SwapTarget } from "./protocol.js";
import type { JobFaces } from "./sources.js";
import type { StyleParams } from "./swap.js";
import { FaceTracker, iou, SAME_FACE, type Track } from "./tracker.js";
import type { WorkerPool } from "./worker-pool.js";

export interface SwapPlan {
  /** Keys the frames and sources the workers hold for this render. */
  job: number;
  mode: FaceSwapMode;
  /**
   * The job's new faces and the originals they replace (see loadJobFaces), still being analysed
   * when the stage starts: the first frames' faces are found meanwhile, as neither needs the other.
   */
  faces: Promise<JobFaces>;
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
/**
 * About how often the faces' lids are read (see eyeOpenness): the iris model costs more than the mesh
 * model. Never more often than every 2N frames (see lidsEvery): with 16 workers at 25 fps, every 1.28 s.
 */
const LIDS_EVERY_SECONDS = 0.5;
/**
 * Seconds before a face that matched no original is tried again, doubling from the first to the
 * last: a person turned away at first is matched once they turn, and one who is nobody's original
 * (the people left alone in a group) costs a try every few seconds, not every second. A try took
 * about a second of a worker with the render waiting.
 */
const DESCRIBE_RETRY_SECONDS = [1, 8] as const;
/**
 * Shortest run of frames a face is drawn on (see lasting). The detector reads some faces only now and
 * then (a head in profile, a pattern in the background): drawn, such a face showed a different person
 * for a frame or two and then the footage's again, a flash; the sofa clip's profile face did so on its
 * first two frames at 10 fps.
 */
const MIN_RUN_SECONDS = 0.3;

/** Index of the candidate embedding that is the same person as `embedding` (the most similar one), or -1. */
export async function matchPerson(pool: WorkerPool, worker: number, embedding: number[], candidates: number[][]): Promise<number> {
  const similarities = await pool.call<number[]>(worker, { type: "similarities", embedding, candidates });
  const best = similarities.reduce((b, s, i) => (s > (similarities[b] ?? -1) ? i : b), -1);
  return best >= 0 && similarities[best]! >= MATCH_THRESHOLD ? best : -1;
}

/**
 * Frame i goes to worker i mod N, which finds the faces in it and keeps it. The mesh model, the
 * largest cost of a frame after the drawing, runs on every other run of N frames only (see meshed),
 * so each worker meshes every other frame of its share; the faces of a frame in between are drawn
 * from the meshed frames on either side of it (see facesBetween), as far along as the picture moved
 * (see motionShares), unless it begins a new scene.
 * Tracking runs here, one frame after another in order (it needs the previous frame's tracks), with
 * the faces of the next few frames at hand (see lasting); then the same worker draws the frame's
 * targets and hands it back. Detection of later frames overlaps with all of this. Every
 * LIDS_EVERY_SECONDS or so a meshed frame's faces also have their lids read (see eyeOpenness), always
 * on the same frames of a video, so a render does not depend on how busy the machine was.
 */
export class SwapStage implements FrameStage {
  readonly window: number;
  private readonly tracker: FaceTracker;
  private previous: Promise<SwapTarget[]> = Promise.resolve([]);
  /**
   * The signature of the last frame whose targets were worked out afresh: a frame showing the same
   * picture is drawn with the same targets (see process). Compared with that frame rather than the
   * one before, a slow drift of the picture adds up and is followed.
   */
  private drawnFrom: Float32Array | undefined;
  /** Each frame's faces (see process), or null once the stage has ended without that frame. */
  private readonly found = new Map<number, PromiseWithResolvers<FaceData[] | null>>();
  /** The number of frames, once the last has been submitted. */
  private frames = Infinity;
  /** Frames between readings of the lids: a whole number of 2N (see readsLids). */
  private readonly lidsEvery: number;
  /** Frames a face's run must last to be drawn (see MIN_RUN_SECONDS), so how far ahead a frame looks. */
  private readonly minRun: number;
  /** Motion signatures of the frames in flight: a frame between meshed frames is timed by them (see motionShares). */
  private readonly signatures = new Map<number, Float32Array>();
  /**
   * Resolves with the embeddings of the people the new faces replace (individual-faces) once every
   * worker holds the new faces; no frame is drawn before.
   */
  private readonly sourcesHeld: Promise<number[][]>;

  constructor(
    private readonly pool: WorkerPool,
    private readonly plan: SwapPlan,
  ) {
    this.minRun = Math.max(2, Math.ceil(plan.fps * MIN_RUN_SECONDS));
    // A frame waits for the faces of the minRun - 1 frames after it, and the last of those, between
    // meshed frames, for the next meshed frame, at most N later: all are in flight with it.
    this.window = pool.size * 3 + this.minRun - 1;
    this.tracker = new FaceTracker(plan.fps);
    const cycle = 2 * pool.size;
    this.lidsEvery = cycle * Math.max(1, Math.round((plan.fps * LIDS_EVERY_SECONDS) / cycle));
    this.sourcesHeld = plan.faces.then(async ({ sources, originals }) => {
      await pool.broadcast({ type: "sources", job: plan.job, sources });
      return originals;
    });
    // A face image that cannot be used fails every frame, and the render with the first.
    this.sourcesHeld.catch(() => {});
  }

  /** Whether frame `index` is meshed: the first N frames, then every other run of N. */
  private meshed(index: number): boolean {
    return Math.floor(index / this.pool.size) % 2 === 0;
  }

  /**
   * Whether frame `index` has its faces' lids read: the k-th reading falls k mod N frames into its
   * stretch of lidsEvery, so the readings go to each worker in turn, and on a meshed frame (lidsEvery
   * being a whole number of 2N, the stretch starts a run of meshed frames N long).
   */
  private readsLids(index: number): boolean {
    return index % this.lidsEvery === Math.floor(index / this.lidsEvery) % this.pool.size;
  }

  process(frame: Buffer, index: number): Promise<Buffer> {
    const { job, width, height } = this.plan;
    const worker = index % this.pool.size;
    const signature = motionSignature(frame, width, height);
    this.signatures.set(index, signature);
    const pixels = ownArrayBuffer(frame);
    const mesh = this.meshed(index);
    const eyes = this.readsLids(index);
    const detected = this.pool.call<FaceData[] | null>(worker, { type: "detect", job, frame: index, pixels, width, height, mesh, eyes }, [pixels]);
    const faces = detected.then((own) => own ?? this.between(index));
    const found = this.facesOf(index);
    faces.then(found.resolve, found.reject);
    const upcoming = Promise.all(Array.from({ length: this.minRun - 1 }, (_, k) => this.facesOf(index + 1 + k).promise));
    const targets = Promise.all([faces, upcoming, this.sourcesHeld, this.previous]).then(([list, after, originals, before]) => {
      // Frames after this one draw from meshed frames no earlier than N before the next.
      for (const done of this.found.keys()) if (done < index - this.pool.size) this.found.delete(done);
      for (const done of this.signatures.keys()) if (done < index - this.pool.size) this.signatures.delete(done);
      // A frame the footage repeats is drawn as the frame before was: the mesh model's reading of the
      // same pixels from a new crop, and the filter catching up on a face that had been moving,
      // moved the new face while the head held still.
      if (this.drawnFrom && samePicture(this.drawnFrom, signature)) {
        this.tracker.hold(index);
        return before;
      }
      this.drawnFrom = signature;
      return this.targets(worker, index, list, after, originals);
    });
    this.previous = targets;
    targets.catch(() => {});
    return targets
      .then((list) => this.pool.call<ArrayBuffer>(worker, { type: "finish", job, frame: index, targets: list, style: this.plan.style }))
      .then((buffer) => Buffer.from(buffer));
  }

  ended(frames: number): void {
    this.frames = frames;
    for (const [index, found] of this.found) if (index >= frames) found.resolve(null);
  }

  /** The faces of frame `index`, which was not meshed, from the meshed frames before and after it. */
  private async between(index: number): Promise<FaceData[]> {
    let before = index - 1, after = index + 1;
    while (!this.meshed(before)) before--;
    while (!this.meshed(after)) after++;
    const [a, b] = await Promise.all([this.facesOf(before).promise, this.facesOf(after).promise]);
    // Past the last frame there is nothing to draw towards.
    if (!b) return a ?? [];
    const stretch = Array.from({ length: after - before + 1 }, (_, k) => this.signatures.get(before + k)!);
    return facesBetween(a ?? [], b, motionShares(stretch)[index - before]!);
  }

  private facesOf(index: number): PromiseWithResolvers<FaceData[] | null> {
    let found = this.found.get(index);
    if (!found) {
      this.found.set(index, (found = Promise.withResolvers()));
      // A render that fails leaves the frames after it waiting; their rejections are handled there.
      found.promise.catch(() => {});
      if (index >= this.frames) found.resolve(null);
    }
    return found;
  }

  /**
   * Drops whatever the workers still hold for this render; resolves with the time they spent on it,
   * by part and summed over the workers, or undefined when a worker could not answer.
   */
  async end(): Promise<StageTimes | undefined> {
    // New faces arriving after the end would stay on the workers for good.
    await this.sourcesHeld.catch(() => {});
    const replies = (await this.pool.broadcast({ type: "end", job: this.plan.job }).catch(() => undefined)) as StageTimes[] | undefined;
    return replies?.reduce(addStageTimes);
  }

  private async targets(worker: number, index: number, faces: FaceData[], upcoming: (FaceData[] | null)[], originals: number[][]): Promise<SwapTarget[]> {
    const tracks = this.tracker.update(index, faces).filter((track) => lasting(track, index, upcoming, this.minRun));
    const drawn = (track: Track, source: number): SwapTarget => ({ source, mesh: track.mesh, depth: track.depth, neutral: track.shape.neutral, lowered: track.lowered });
    if (this.plan.mode === "all-faces") return tracks.map((track) => drawn(track, 0));
    const unknown = tracks.filter((track) => track.source === undefined && track.describeAt <= index);
    if (unknown.length > 0) await this.identify(worker, index, unknown, originals, upcoming[0] !== null);
    return tracks.flatMap((track) => (track.source !== undefined && track.source >= 0 ? [drawn(track, track.source)] : []));
  }

  /**
   * Embeds the faces of new tracks (once per track, not per frame) and picks the mapping whose
   * original is most similar. A face that matches none is retried later (a better angle, see
   * DESCRIBE_RETRY_SECONDS), and left untouched meanwhile.
   */
  private async identify(worker: number, index: number, tracks: Track[], originals: number[][], hasNext: boolean): Promise<void> {
    // Two workers embed at once: every other face on the next frame, a twenty-fifth of a second
    // later, which its worker holds until it is drawn, after this one.
    const split = hasNext && this.pool.size > 1;
    const describe = (frame: number, part: Track[]) =>
      part.length === 0
        ? Promise.resolve([])
        : this.pool.call<FaceData[]>(frame % this.pool.size, { type: "describe", job: this.plan.job, frame, boxes: part.map((track) => [...track.box]) });
    const described = (
      await Promise.all([
        describe(index, split ? tracks.filter((_, i) => i % 2 === 0) : tracks),
        describe(index + 1, split ? tracks.filter((_, i) => i % 2 === 1) : []),
      ])
    ).flat();
    const [first, last] = DESCRIBE_RETRY_SECONDS;
    for (const track of tracks) {
      track.describeAt = index + Math.max(1, Math.round(this.plan.fps * Math.min(last, first * 2 ** track.describeTries++)));
      const face = described
        .filter((candidate) => candidate.embedding && iou(candidate.box, track.box) >= SAME_FACE)
        .sort((a, b) => iou(b.box, track.box) - iou(a.box, track.box))[0];
      if (!face?.embedding) continue;
      const match = await matchPerson(this.pool, worker, face.embedding, originals);
      if (match >= 0) track.source = match;
    }
  }
}

/**
 * Whether the face of `track` at frame `index` is drawn: once its run of frames (this one included)
 * lasts `minRun` frames, counting those of `upcoming` (the faces of the frames after this one, null
 * past the last frame) that still have it, each found by its overlap with the one before. A face the
 * detector finds on a frame or two alone would show as a different person for that long, a flash; one
 * that stays is drawn from its first frame, and one seen up to the last frame is drawn.
 */
export function lasting(track: Track, index: number, upcoming: readonly (readonly FaceData[] | null)[], minRun: number): boolean {
  let run = index - track.runFrom + 1;
  let box: readonly number[] = track.box;
  for (const faces of upcoming) {
    if (run >= minRun || faces === null) return true;
    const seen = faces.find((face) => iou(face.box, box) >= SAME_FACE);
    if (!seen) return false;
    box = seen.box;
    run++;
  }
  return run >= minRun;
}

function ownArrayBuffer(frame: Buffer): ArrayBuffer {
  if (frame.byteOffset === 0 && frame.byteLength === frame.buffer.byteLength) return frame.buffer as ArrayBuffer;
  return frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer;
}
