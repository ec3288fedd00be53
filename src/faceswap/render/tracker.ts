import type { FaceData } from "./protocol.js";
import { fitSimilarity } from "./similarity.js";

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
  /** The person's shape without passing expressions; its `neutral` lies over `mesh`. */
  shape: NeutralShape;
  lastFrame: number;
  /** Index of the source face drawn on it; undefined while unknown, -1 for none. */
  source: number | undefined;
  /** Frame from which to try identifying it again while `source` is unknown. */
  describeAt: number;
}

const MIN_IOU = 0.3;
// One-euro filter (Casiez et al.): heavy smoothing while a face is still, little when it moves fast,
// so landmarks do not jitter and yet do not lag. Speeds are in face sizes per second. It filters each
// point's motion relative to the face as a whole (see smooth), which is followed at once.
const MIN_CUTOFF_HZ = 1.5;
const BETA = 1.5;
const DERIVATIVE_CUTOFF_HZ = 1;

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
    const pairs: Array<[number, number, number]> = [];
    faces.forEach((face, f) =>
      this.tracks.forEach((track, t) => {
        const overlap = iou(face.box, track.box);
        if (overlap >= MIN_IOU) pairs.push([overlap, f, t]);
      }),
    );
    pairs.sort((a, b) => b[0] - a[0]);
    const matched = new Array<Track | undefined>(faces.length);
    const taken = new Set<number>();
    for (const [, f, t] of pairs) {
      if (matched[f] || taken.has(t)) continue;
      matched[f] = this.tracks[t];
      taken.add(t);
    }
    return faces.map((face, f) => {
      const track = matched[f];
      if (!track) return this.start(frame, face);
      this.smooth(track, face, frame);
      return track;
    });
  }

  private start(frame: number, face: FaceData): Track {
    const track: Track = {
      id: this.nextId++,
      box: face.box,
      mesh: Float32Array.from(face.mesh),
      depth: face.depth,
      velocity: new Float32Array(face.mesh.length),
      shape: new NeutralShape(face.mesh),
      lastFrame: frame,
      source: undefined,
      describeAt: frame,
    };
    this.tracks.push(track);
    return track;
  }

  private smooth(track: Track, face: FaceData, frame: number): void {
    const dt = (frame - track.lastFrame) / this.fps;
    const size = Math.max(1, Math.sqrt(face.box[2] * face.box[3]));
    const derivativeAlpha = alpha(DERIVATIVE_CUTOFF_HZ, dt);
    // The face's motion as a whole (the similarity transform from the smoothed mesh to this frame's)
    // is taken at once, and only what the points do besides is smoothed: filtered as they were, the
    // points of a head rolling by half a radian a second lagged behind it (at 10 fps the new face sat
    // 0.14-0.30 of the eye distance off the target's features, and its edge showed as a line on the
    // cheek). The transform, fitted to all the points, carries little of each one's jitter; the whole
    // mesh's own jitter passes (the test clips' flicker rose by at most 0.05).
    const motion = fitSimilarity(track.mesh, face.mesh);
    for (let i = 0; i < face.mesh.length; i++) {
      const x = track.mesh[i - (i % 2)]!, y = track.mesh[i - (i % 2) + 1]!;
      const previous = i % 2 === 0 ? motion.x(x, y) : motion.y(x, y);
      const speed = (face.mesh[i]! - previous) / dt;
      const velocity = track.velocity[i]! + derivativeAlpha * (speed - track.velocity[i]!);
      track.velocity[i] = velocity;
      const cutoff = MIN_CUTOFF_HZ + (BETA * Math.abs(velocity)) / size;
      track.mesh[i] = previous + alpha(cutoff, dt) * (face.mesh[i]! - previous);
    }
    track.box = face.box;
    track.depth = face.depth;
    track.lastFrame = frame;
    track.shape.update(track.mesh);
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

export function iou(a: readonly number[], b: readonly number[]): number {
  const [ax, ay, aw, ah] = a as [number, number, number, number];
  const [bx, by, bw, bh] = b as [number, number, number, number];
  const w = Math.min(ax + aw, bx + bw) - Math.max(ax, bx);
  const h = Math.min(ay + ah, by + bh) - Math.max(ay, by);
  if (w <= 0 || h <= 0) return 0;
  const inter = w * h;
  return inter / (aw * ah + bw * bh - inter);
}
