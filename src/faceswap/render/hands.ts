import type { Config, Human } from "@vladmandic/human";
import type { RgbImage } from "./images.js";
import { pointBounds } from "./pixels.js";
import { iou, SAME_FACE } from "./tracker.js";
import { modelInput, type MeshFrame } from "./upright.js";

/**
 * Finds hands in consecutive video frames of one render (one worker's share of them) with Human's hand
 * models (handtrack finds the boxes, handlandmark-lite the 21 keypoints in each). A search costs several
 * times the face detection of a frame, so it runs only on frames with a face: while no hand is seen,
 * when something moves around a face (see `moved`), when a face's surroundings have changed since the
 * last search (see `drift`) and otherwise every HAND_INTERVAL-th such frame; once one is near a face
 * (see nearAFace), every frame, with the keypoints followed from the previous frame's hands (the
 * landmark model alone on boxes around them) and the boxes searched again on every HAND_REDETECT-th
 * frame, so a second hand is not missed for long. Each render has its own finder, and the hands it
 * follows are its own: Human keeps the hands it follows in one place per worker, which renders
 * sharing a worker would overwrite with each other's, so following runs the landmark model here instead.
 */
export class HandFinder {
  private sinceSearch = Infinity;
  /** Keypoints of the hands found in this render's previous frame, which the next one follows. */
  private hands: Float32Array[] = [];
  /** Luma of this finder's previous frame on a grid of every MOTION_GRID-th pixel. */
  private previous: Float32Array | undefined;
  /** Each face's surroundings (see surroundings) on the frame of the last search. */
  private searched: Array<{ box: readonly number[]; luma: Float32Array }> = [];
  /** Searches run so far (the costly part: see HAND_INTERVAL). */
  searches = 0;

  constructor(private readonly human: Human) {}

  /**
   * The keypoints (x, y pairs in frame pixels) of each hand in `frame`, whose faces lie in `boxes`
   * ([x, y, width, height]): boxes that grow and shrink with the faces (see FaceFollower.extents),
   * or the drift of their surroundings steps with them.
   */
  async find(frame: MeshFrame, boxes: readonly (readonly number[])[]): Promise<Float32Array[]> {
    const moved = this.moved(frame, boxes);
    if (boxes.length === 0) {
      this.hands = [];
      return [];
    }
    this.sinceSearch++;
    // Motion near a face searches on that frame: a hand coming up to a face is painted over until it
    // is found. Footage that moves around its faces all the time is searched on every frame. A hand
    // too slow for that is found once the faces' surroundings have drifted from the last search's.
    const following = this.hands.length > 0;
    const search = following
      ? this.sinceSearch >= HAND_REDETECT
      : this.sinceSearch >= HAND_INTERVAL || moved || drift(this.searched, frame, boxes) > DRIFT_SHARE;
    if (!search && !following) return [];
    if (search) {
      this.sinceSearch = 0;
      this.searches++;
      this.searched = boxes.map((box) => ({ box, luma: surroundings(frame, box) }));
      // cacheSensitivity 0: Human searches afresh and follows nothing it holds from an earlier call.
      const config = {
        cacheSensitivity: 0,
        face: { enabled: false },
        hand: { enabled: true, minConfidence: HAND_SCORE, maxDetected: HAND_MAX, skipFrames: 0, skipTime: 0, rotation: true, landmarks: true },
      } as Partial<Config>;
      const result = await this.human.detect(frame.tensor(), config);
      this.hands = result.hand
        .filter((hand) => hand.fingerScore >= FINGER_SCORE && hand.keypoints.length === 21)
        .map((hand) => Float32Array.from(hand.keypoints.flatMap((point) => [point[0], point[1]])));
    } else {
      this.hands = await this.follow(frame);
    }
    // A hand away from every face (on a knee, a railing) changes no face; followed, it cost the
    // landmark model on every frame and a search on every HAND_REDETECT-th. Let go, it is searched for
    // again as any hand is, once something moves around a face.
    this.hands = this.hands.filter((hand) => nearAFace(hand, boxes));
    return this.hands;
  }

  /**
   * The previous frame's hands found again in `frame`: the landmark model on a square around each
   * one's keypoints grown by FOLLOW_GROW (as Human follows them); those it no longer scores as a hand
   * are dropped.
   */
  private async follow(frame: RgbImage): Promise<Float32Array[]> {
    const model = this.human.models.models.handskeleton;
    if (!model) throw new Error("the hand landmark model is not loaded");
    const [, size] = model.inputs[0]!.shape as number[];
    const tf = this.human.tf as typeof import("@tensorflow/tfjs-core");
    const found: Float32Array[] = [];
    for (const points of this.hands) {
      const { minX, minY, maxX, maxY } = pointBounds(points);
      const side = Math.max(maxX - minX, maxY - minY) * FOLLOW_GROW;
      const left = (minX + maxX - side) / 2, top = (minY + maxY - side) / 2;
      const box = [top / frame.height, left / frame.width, (top + side) / frame.height, (left + side) / frame.width] as const;
      const [score, keypoints] = tf.tidy(
        () => model.execute(modelInput(tf, frame, box, size!), ["Identity_1", "Identity"]) as import("@tensorflow/tfjs-core").Tensor[],
      );
      try {
        const raw = (await score!.data())[0]!;
        // The model's score is a logit; Human reports it through the same sigmoid, in hundredths.
        if ((100 - Math.trunc(100 / (1 + Math.exp(raw)))) / 100 < FINGER_SCORE) continue;
        const values = await keypoints!.data();
        const hand = new Float32Array(42);
        for (let k = 0; k < 21; k++) {
          hand[2 * k] = left + (values[3 * k]! / size!) * side;
          hand[2 * k + 1] = top + (values[3 * k + 1]! / size!) * side;
        }
        found.push(hand);
      } finally {
        tf.dispose([score!, keypoints!]);
      }
    }
    return found;
  }

  /**
   * Whether more than MOTION_SHARE of the grid's points around the faces (their boxes grown by half on
   * each side) changed luma by more than MOTION_STEP since the previous frame: a hand coming up to a
   * face does; a still or slowly panned face does not.
   */
  private moved({ pixels, width, height }: RgbImage, boxes: readonly (readonly number[])[]): boolean {
    const gw = Math.ceil(width / MOTION_GRID), gh = Math.ceil(height / MOTION_GRID);
    const luma = new Float32Array(gw * gh);
    for (let y = 0; y < gh; y++) {
      for (let x = 0; x < gw; x++) {
        const p = (y * MOTION_GRID * width + x * MOTION_GRID) * 3;
        luma[y * gw + x] = 0.299 * pixels[p]! + 0.587 * pixels[p + 1]! + 0.114 * pixels[p + 2]!;
      }
    }
    const previous = this.previous?.length === luma.length ? this.previous : undefined;
    this.previous = luma;
    if (!previous) return true;
    // The grid points in any grown box, each counted once however many boxes hold it.
    const near = new Uint8Array(gw * gh);
    for (const box of boxes) {
      const { left, top, right, bottom } = aboutFace(box);
      const [x0, x1] = gridSpan(left, right, gw), [y0, y1] = gridSpan(top, bottom, gh);
      for (let y = y0; y < y1; y++) near.fill(1, y * gw + x0, y * gw + x1);
    }
    let changed = 0, n = 0;
    for (let i = 0; i < near.length; i++) {
      if (near[i] === 0) continue;
      n++;
      if (Math.abs(luma[i]! - previous[i]!) > MOTION_STEP) changed++;
    }
    return changed > MOTION_SHARE * n;
  }
}

/**
 * The largest share of a face's surroundings (see surroundings) whose luma changed by more than
 * MOTION_STEP since the last search, or 1 for a face the last search did not see. Taken about each
 * face's extent, the surroundings hold still while the camera pans or zooms with the face, so a hand
 * that creeps in adds up here where the motion between two frames (see `moved`) stays too small.
 */
function drift(searched: ReadonlyArray<{ box: readonly number[]; luma: Float32Array }>, frame: RgbImage, boxes: readonly (readonly number[])[]): number {
  let largest = 0;
  for (const box of boxes) {
    // A box clamped to nothing at the frame's edge matches no box, itself included.
    if (!(box[2]! > 0 && box[3]! > 0)) continue;
    let before: Float32Array | undefined, best = SAME_FACE;
    for (const face of searched) {
      const overlap = iou(face.box, box);
      if (overlap >= best) [before, best] = [face.luma, overlap];
    }
    if (!before) return 1;
    const now = surroundings(frame, box);
    let changed = 0, cells = 0;
    for (let i = 0; i < now.length; i++) {
      if (Number.isNaN(now[i]!) || Number.isNaN(before[i]!)) continue;
      cells++;
      if (Math.abs(now[i]! - before[i]!) > MOTION_STEP) changed++;
    }
    if (cells > 0) largest = Math.max(largest, changed / cells);
  }
  return largest;
}

/**
 * The mean luma of each of DRIFT_GRID x DRIFT_GRID cells over a face's box grown by half on every
 * side, every other pixel of a cell read: cells a fraction of the face in size, so a box that jitters
 * by a pixel or two moves them little. The cells over the box itself are left out (NaN), as are cells
 * outside the frame: a face talks, blinks and turns, while a hand reaches it across its surroundings.
 */
function surroundings({ pixels, width, height }: RgbImage, box: readonly number[]): Float32Array {
  const cells = new Float32Array(DRIFT_GRID * DRIFT_GRID).fill(NaN);
  const { left, top } = aboutFace(box), cw = (2 * box[2]!) / DRIFT_GRID, ch = (2 * box[3]!) / DRIFT_GRID;
  const [inner, outer] = [DRIFT_GRID / 4, (3 * DRIFT_GRID) / 4];
  for (let gy = 0; gy < DRIFT_GRID; gy++) {
    const y0 = Math.round(top + gy * ch), y1 = Math.max(y0 + 1, Math.round(top + (gy + 1) * ch));
    if (y0 < 0 || y1 > height) continue;
    for (let gx = 0; gx < DRIFT_GRID; gx++) {
      const x0 = Math.round(left + gx * cw), x1 = Math.max(x0 + 1, Math.round(left + (gx + 1) * cw));
      if (x0 < 0 || x1 > width || (gx >= inner && gx < outer && gy >= inner && gy < outer)) continue;
      let sum = 0, n = 0;
      for (let y = y0; y < y1; y += 2) {
        for (let x = x0, p = (y * width + x0) * 3; x < x1; x += 2, p += 6, n++) sum += 0.299 * pixels[p]! + 0.587 * pixels[p + 1]! + 0.114 * pixels[p + 2]!;
      }
      cells[gy * DRIFT_GRID + gx] = sum / n;
    }
  }
  return cells;
}

/** A face's box ([x, y, width, height]) grown by half on every side: the area about it that `moved` and `drift` watch. */
function aboutFace([bx, by, bw, bh]: readonly number[]): { left: number; top: number; right: number; bottom: number } {
  return { left: bx! - bw! / 2, top: by! - bh! / 2, right: bx! + 1.5 * bw!, bottom: by! + 1.5 * bh! };
}

/** Whether the bounds of `hand`'s keypoints reach into the area about a face (see aboutFace). */
function nearAFace(hand: Float32Array, boxes: readonly (readonly number[])[]): boolean {
  const { minX, minY, maxX, maxY } = pointBounds(hand);
  return boxes.some((box) => {
    const { left, top, right, bottom } = aboutFace(box);
    return maxX >= left && minX <= right && maxY >= top && minY <= bottom;
  });
}

/** The grid indices from the first whose pixel lies at or past `from` to the first at or past `to`, within `count`. */
function gridSpan(from: number, to: number, count: number): [number, number] {
  const first = Math.min(count, Math.max(0, Math.ceil(from / MOTION_GRID)));
  return [first, Math.max(first, Math.min(count, Math.max(0, Math.ceil(to / MOTION_GRID))))];
}

/**
 * Frames with a face between searches for hands while none is seen and neither the motion between two
 * frames nor the drift of a face's surroundings calls for one (a worker sees every Nth frame of a
 * video: with two workers, 96 is about eight seconds at 25 fps). A search took 70-250 ms of one core on
 * a loaded machine (230-500 ms with both workers busy), the faces of a frame with three 20: searching
 * every third frame took the 576 px render from 47 to 15 fps there, and every 24th, before the drift
 * was watched, cost 11 ms of CPU a frame. Unchanged pixels would answer a search as the last one did;
 * this bounds how long a change too small for either measure goes unlooked at.
 */
const HAND_INTERVAL = 96;
// Around the faces of the panned and zoomed three-person clip 0.02-0.03 of the grid changes by more
// than 24 between a worker's frames, at 576 and 1080 px; with a hand moving past a face, 0.15.
const MOTION_GRID = 4;
const MOTION_STEP = 24;
const MOTION_SHARE = 0.06;
// Against the last search, 0.06 of the cells about a face changed by more than MOTION_STEP when a hand
// creeping in at 31 px/s (too slow for MOTION_SHARE) was about to reach the face's box, 0.1 once it
// covered 3 % of it; about the faces of two panned and zoomed clips and of a still one with sensor
// noise, at most 0.021 over 4 s. Footage whose background moves behind a face is searched more often.
const DRIFT_GRID = 16;
const DRIFT_SHARE = 0.06;
/** Frames between searches for new hands while following one. */
const HAND_REDETECT = 6;
/** Hands searched for. */
const HAND_MAX = 4;
/** Side of the square a followed hand is looked for in, over its keypoints' extent (Human's own factor). */
const FOLLOW_GROW = 1.6;
// A real hand half hidden behind a face's outline scored 0.39 on the box model; the keypoint model's
// score tells the hands from the rest: 0.73-0.74 on hands, 0.51 on the knuckles, sleeves and glasses it
// boxed on the test photos.
const HAND_SCORE = 0.3;
const FINGER_SCORE = 0.6;
