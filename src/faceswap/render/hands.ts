import type { Config, Human } from "@vladmandic/human";
import type { RgbImage } from "./images.js";
import { pointBounds } from "./pixels.js";
import { modelInput, type MeshFrame } from "./upright.js";

/**
 * Finds hands in consecutive video frames of one render (one worker's share of them) with Human's hand
 * models (handtrack finds the boxes, handlandmark-lite the 21 keypoints in each). A search costs several
 * times the face detection of a frame, so it runs only on frames with a face: while no hand is seen,
 * when something moves around a face (see `moved`) and otherwise every HAND_INTERVAL-th such frame;
 * once one is, every frame, with the keypoints followed from the previous frame's hands (the landmark
 * model alone on boxes around them) and the boxes searched again on every HAND_REDETECT-th frame, so a
 * second hand is not missed for long. Each render has its own finder, and the hands it follows are its
 * own: Human keeps the hands it follows in one place per worker, which renders sharing a worker would
 * overwrite with each other's, so following runs the landmark model here instead.
 */
export class HandFinder {
  private sinceSearch = Infinity;
  /** Keypoints of the hands found in this render's previous frame, which the next one follows. */
  private hands: Float32Array[] = [];
  /** Luma of this finder's previous frame on a grid of every MOTION_GRID-th pixel. */
  private previous: Float32Array | undefined;

  constructor(private readonly human: Human) {}

  /**
   * The keypoints (x, y pairs in frame pixels) of each hand in `frame`, whose faces have `boxes`
   * ([x, y, width, height]).
   */
  async find(frame: MeshFrame, boxes: readonly (readonly number[])[]): Promise<Float32Array[]> {
    const moved = this.moved(frame, boxes);
    if (boxes.length === 0) {
      this.hands = [];
      return [];
    }
    this.sinceSearch++;
    // Motion near a face searches on that frame: a hand coming up to a face is painted over until it
    // is found. Footage that moves around its faces all the time is searched on every frame.
    const following = this.hands.length > 0;
    const search = following ? this.sinceSearch >= HAND_REDETECT : this.sinceSearch >= HAND_INTERVAL || moved;
    if (!search && !following) return [];
    if (search) {
      this.sinceSearch = 0;
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
    for (const [bx, by, bw, bh] of boxes) {
      const [x0, x1] = gridSpan(bx! - bw! / 2, bx! + 1.5 * bw!, gw), [y0, y1] = gridSpan(by! - bh! / 2, by! + 1.5 * bh!, gh);
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

/** The grid indices from the first whose pixel lies at or past `from` to the first at or past `to`, within `count`. */
function gridSpan(from: number, to: number, count: number): [number, number] {
  const first = Math.min(count, Math.max(0, Math.ceil(from / MOTION_GRID)));
  return [first, Math.max(first, Math.min(count, Math.max(0, Math.ceil(to / MOTION_GRID))))];
}

/**
 * Frames with a face between searches for hands while none is seen and nothing moves near a face (a
 * worker sees every Nth frame of a video: with two workers, 24 is about two seconds at 25 fps); the
 * motion near a face finds a hand coming in. A search took 70-250 ms of one core on a loaded machine,
 * the faces of a frame with three 20: searching every third frame took the 576 px render from 47 to
 * 15 fps there, every twelfth added 11-13 ms of CPU to each frame.
 */
const HAND_INTERVAL = 24;
// Around the faces of the panned and zoomed three-person clip 0.02-0.03 of the grid changes by more
// than 24 between a worker's frames, at 576 and 1080 px; with a hand moving past a face, 0.15.
const MOTION_GRID = 4;
const MOTION_STEP = 24;
const MOTION_SHARE = 0.06;
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
