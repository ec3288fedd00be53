import { lidsLowered } from "./eye-openness.js";
import type { FaceData } from "./protocol.js";
import { fitSimilarity, Similarity } from "./similarity.js";

/** A face followed across frames: same person, smoothed landmarks. */
export interface Track {
  id: number;
  box: [number, number, number, number];
  /** Smoothed mesh (x, y pairs), what is drawn. */
  mesh: Float32Array;
  /** Depth of each point in the latest frame (see FaceData); it only orders triangles, so it is not smoothed. */
  depth: Float32Array;
  /** Smoothed landmark velocity, pixels per second. */
  velocity: Float32Array;
  /** Smoothed velocity of the face as a whole: shift x and y (face sizes), rotation (radians) and log scale, per second. */
  poseVelocity: Float64Array;
  /** How far its lids are lowered (see lidsLowered), faded towards the last reading, `loweredTo`. */
  lowered: number;
  /** The last reading of its lids; undefined until one is made. */
  loweredTo: number | undefined;
  /** The person's shape without passing expressions; its `neutral` lies over `mesh`. */
  shape: NeutralShape;
  lastFrame: number;
  /** First frame of its current unbroken run of frames with a face (see SwapStage's `lasting`). */
  runFrom: number;
  /** Index of the source face drawn on it; undefined while unknown, -1 for none. */
  source: number | undefined;
  /** Frame from which to try identifying it again while `source` is unknown. */
  describeAt: number;
  /** Tries at identifying it so far. */
  describeTries: number;
}

/** Box overlap from which two faces of nearby frames are the same face. */
export const SAME_FACE = 0.3;
// One-euro filter (Casiez et al.): heavy smoothing while a face is still, little when it moves fast,
// so landmarks do not jitter and yet do not lag. Speeds are in face sizes per second. It filters each
// point's motion relative to the face as a whole (see smooth), which has its own filter below.
const MIN_CUTOFF_HZ = 1.5;
const BETA = 1.5;
const DERIVATIVE_CUTOFF_HZ = 1;
// The face's motion as a whole has a one-euro filter of its own, in face sizes per second (a radian
// of rotation counts as half a face size): heavy while the face holds still, so the detector's jitter
// of the whole mesh does not shimmer the new face, and hardly any once it moves (a head rolling by half
// a radian a second is followed within a frame or two).
const POSE_MIN_CUTOFF_HZ = 0.5;
const POSE_BETA = 6;
const POSE_ROTATION_SIZE = 0.5;
// The lids' readings come about twice a second (see SwapStage); a new one is faded in over about a
// third of a second, so the drawn eyes change the way lids move rather than in one frame.
const LIDS_CUTOFF_HZ = 1;

/** Matches each frame's faces to tracks by box overlap and smooths their meshes over time. */
export class FaceTracker {
  private tracks: Track[] = [];
  private nextId = 1;
  private readonly maxGap: number;

  constructor(private readonly fps: number) {
    // A face missed for half a second (occlusion, a detector miss) keeps its track and identity.
    this.maxGap = Math.max(2, Math.round(fps / 2));
  }

  /** The tracks of the faces in `frame`, in the order of `faces`; new faces start new tracks. */
  update(frame: number, faces: FaceData[]): Track[] {
    this.tracks = this.tracks.filter((track) => frame - track.lastFrame <= this.maxGap);
    const paired = pairByOverlap(faces.map((face) => face.box), this.tracks.map((track) => track.box));
    const matched = paired.map((t) => (t === undefined ? undefined : this.tracks[t]));
    return faces.map((face, f) => {
      const track = matched[f];
      if (!track) return this.start(frame, face);
      this.smooth(track, face, frame);
      return track;
    });
  }

  /** Frame `frame` repeats the one before: the tracks on that one are on it too, as they were. */
  hold(frame: number): void {
    for (const track of this.tracks) if (track.lastFrame === frame - 1) track.lastFrame = frame;
  }

  private start(frame: number, face: FaceData): Track {
    // The first reading holds at once: a face first seen looking down is not faded in from open.
    const reading = face.eyes != null ? lidsLowered(face.eyes) : undefined;
    const track: Track = {
      id: this.nextId++,
      box: face.box,
      mesh: Float32Array.from(face.mesh),
      depth: face.depth,
      velocity: new Float32Array(face.mesh.length),
      poseVelocity: new Float64Array(4),
      lowered: reading ?? 0,
      loweredTo: reading,
      shape: new NeutralShape(face.mesh),
      lastFrame: frame,
      runFrom: frame,
      source: undefined,
      describeAt: frame,
      describeTries: 0,
    };
    this.tracks.push(track);
    return track;
  }

  private smooth(track: Track, face: FaceData, frame: number): void {
    const dt = (frame - track.lastFrame) / this.fps;
    const size = Math.max(1, Math.sqrt(face.box[2] * face.box[3]));
    const derivativeAlpha = alpha(DERIVATIVE_CUTOFF_HZ, dt);
    // The face's motion as a whole (the similarity transform from the smoothed mesh to this frame's)
    // has a filter of its own (poseMotion), and only what the points do besides is smoothed point by
    // point: filtered point by point, the points of a head rolling by half a radian a second lagged
    // behind it (at 10 fps the new face sat 0.14-0.30 of the eye distance off the target's features,
    // and its edge showed as a line on the cheek). Taken unfiltered, the detector's jitter of the whole
    // mesh made the new face on a still head change more from frame to frame than the footage's own
    // noise (judge flicker 1.12-1.17 against 0.67 for the footage re-encoded; filtered, 0.48, and the
    // rolling head's features 0.03-0.07 of the eye distance off).
    const motion = this.poseMotion(track, fitSimilarity(track.mesh, face.mesh), size, dt);
    for (let i = 0; i < face.mesh.length; i++) {
      const x = track.mesh[i - (i % 2)]!, y = track.mesh[i - (i % 2) + 1]!;
      const previous = i % 2 === 0 ? motion.x(x, y) : motion.y(x, y);
      const speed = (face.mesh[i]! - previous) / dt;
      const velocity = track.velocity[i]! + derivativeAlpha * (speed - track.velocity[i]!);
      track.velocity[i] = velocity;
      const cutoff = MIN_CUTOFF_HZ + (BETA * Math.abs(velocity)) / size;
      track.mesh[i] = previous + alpha(cutoff, dt) * (face.mesh[i]! - previous);
    }
    if (face.eyes != null) track.loweredTo = lidsLowered(face.eyes);
    track.lowered += alpha(LIDS_CUTOFF_HZ, dt) * ((track.loweredTo ?? 0) - track.lowered);
    track.box = face.box;
    track.depth = face.depth;
    if (frame - track.lastFrame > 1) track.runFrom = frame;
    track.lastFrame = frame;
    track.shape.update(track.mesh);
  }

  /** `fit` (from the track's mesh to this frame's) filtered: the share of it the face's speed allows. */
  private poseMotion(track: Track, fit: Similarity, size: number, dt: number): Similarity {
    const dx = fit.toX - fit.fromX, dy = fit.toY - fit.fromY;
    const angle = Math.atan2(fit.sin, fit.cos), logScale = Math.log(Math.hypot(fit.cos, fit.sin));
    const velocity = track.poseVelocity, derivativeAlpha = alpha(DERIVATIVE_CUTOFF_HZ, dt);
    [dx / size, dy / size, angle, logScale].forEach((change, k) => (velocity[k]! += derivativeAlpha * (change / dt - velocity[k]!)));
    const speed = Math.hypot(velocity[0]!, velocity[1]!) + POSE_ROTATION_SIZE * Math.abs(velocity[2]!) + Math.abs(velocity[3]!);
    const share = alpha(POSE_MIN_CUTOFF_HZ + POSE_BETA * speed, dt);
    const scale = Math.exp(share * logScale);
    return new Similarity(fit.fromX, fit.fromY, fit.fromX + share * dx, fit.fromY + share * dy, scale * Math.cos(share * angle), scale * Math.sin(share * angle));
  }
}

/**
 * The mean of a track's meshes, each laid over the mean so far by a similarity transform, and that
 * mean laid over the current mesh (`neutral`): two least-squares fits over the mesh per frame. Speech
 * and blinks come and go, so what the mean keeps of them stays small once it has a second of frames;
 * a mouth open most of the time leaves the mean's lips parted.
 */
export class NeutralShape {
  /** The mean laid over the track's current mesh: that mesh without this frame's expression. */
  readonly neutral: Float32Array;
  private readonly mean: Float64Array;
  private frames = 1;

  constructor(mesh: Float32Array) {
    this.mean = Float64Array.from(mesh);
    this.neutral = Float32Array.from(mesh);
  }

  update(mesh: Float32Array): void {
    const { mean, neutral } = this;
    const weight = 1 / ++this.frames;
    const toMean = fitSimilarity(mesh, mean);
    for (let i = 0; i < mean.length; i += 2) {
      const x = mesh[i]!, y = mesh[i + 1]!;
      mean[i]! += weight * (toMean.x(x, y) - mean[i]!);
      mean[i + 1]! += weight * (toMean.y(x, y) - mean[i + 1]!);
    }
    const toMesh = fitSimilarity(mean, mesh);
    for (let i = 0; i < mean.length; i += 2) {
      neutral[i] = toMesh.x(mean[i]!, mean[i + 1]!);
      neutral[i + 1] = toMesh.y(mean[i]!, mean[i + 1]!);
    }
  }
}

function alpha(cutoffHz: number, dt: number): number {
  const tau = 1 / (2 * Math.PI * cutoffHz);
  return 1 / (1 + tau / dt);
}

/**
 * For each box of `a`, the index of the box of `b` it is paired with, or undefined: pairs overlap by
 * SAME_FACE at least, the largest overlaps are paired first, and each box is paired once.
 */
export function pairByOverlap(a: readonly (readonly number[])[], b: readonly (readonly number[])[]): (number | undefined)[] {
  const pairs: Array<[number, number, number]> = [];
  a.forEach((boxA, i) =>
    b.forEach((boxB, j) => {
      const overlap = iou(boxA, boxB);
      if (overlap >= SAME_FACE) pairs.push([overlap, i, j]);
    }),
  );
  pairs.sort((x, y) => y[0] - x[0]);
  const paired = new Array<number | undefined>(a.length);
  const taken = new Set<number>();
  for (const [, i, j] of pairs) {
    if (paired[i] !== undefined || taken.has(j)) continue;
    paired[i] = j;
    taken.add(j);
  }
  return paired;
}

export function iou(a: readonly number[], b: readonly number[]): number {
  const [ax, ay, aw, ah] = a as [number, number, number, number];
  const [bx, by, bw, bh] = b as [number, number, number, number];
  const w = Math.min(ax + aw, bx + bw) - Math.max(ax, bx);
  const h = Math.min(ay + ah, by + bh) - Math.max(ay, by);
  if (w <= 0 || h <= 0) return 0;
  const inter = w * h;
  return inter / (aw * ah + bw * bh - inter);
}
