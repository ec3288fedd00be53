import type { Human, Point } from "@vladmandic/human";
import type { RgbImage } from "./images.js";
import { EYE_CORNERS } from "./mesh.js";
import { modelInput } from "./upright.js";

type Tf = typeof import("@tensorflow/tfjs-core");
type TfTensor = import("@tensorflow/tfjs-core").Tensor;

/** The crop's side, in corner-to-corner distances: Human's scale for this model (it takes the larger side of the corners' box; level eyes get the same crop). */
const CROP_SCALE = 2.3;
/** Of the iris model's 71 eye-contour points: the lower lid runs 0 (one corner) to 8 (the other), the upper lid 9 to 15. */
const CORNERS = [0, 8] as const;
const LID_PAIRS = [
  [11, 3],
  [12, 4],
  [13, 5],
] as const;
const POINT_VALUES = 76 * 3;

/**
 * How open each face's eyes are, read by Human's iris model: the gap between the lids over the eye's
 * width, for the more closed of its eyes whose crops lie wholly in the frame (a crop cut off at the
 * edge shows the model half an eye), so a face half out of the frame is read by the eye still in it;
 * null for a face with neither. The mesh model cannot tell: it reads lids lowered over eyes that look
 * down as open (0.26-0.33 on the test footage's downcast faces, 0.30-0.35 on open eyes), while the
 * iris model finds them 0.05-0.15 against 0.23-0.45 for open ones. Both eyes of every face go through
 * the model in one batch, every crop mirrored, as Human 3 mirrors both: unmirrored, the downcast
 * eyes of sample2's right face read 0.13-0.22 rather than 0.05-0.07, and open eyes read about as
 * open either way.
 *
 * The model takes about 13 ms for one eye crop on these cores and 48 ms for the six of three faces,
 * more than the mesh model's call for a face, so a render asks for it about twice a second only (see
 * SwapStage).
 */
export async function eyeOpenness(human: Human, frame: RgbImage, meshes: readonly Point[][]): Promise<(number | null)[]> {
  const model = human.models.models.iris;
  if (!model) throw new Error("the iris model is not loaded");
  const tf = human.tf as Tf;
  const size = model.inputs[0]!.shape![2]!;
  const boxes = meshes.map((mesh) => EYE_CORNERS.map(([outer, inner]) => eyeBox(mesh[outer], mesh[inner], frame)));
  // Every eye whose crop lies in the frame, as [face, box].
  const eyes = boxes.flatMap((pair, face) => pair.flatMap((box) => (box ? [[face, box] as const] : [])));
  const openness: (number | null)[] = meshes.map(() => null);
  if (eyes.length === 0) return openness;
  const output = tf.tidy(() => {
    const crops = eyes.map(([, box]) => modelInput(tf, frame, box, size));
    return model.execute(tf.image.flipLeftRight(tf.concat(crops, 0) as import("@tensorflow/tfjs-core").Tensor4D)) as TfTensor;
  });
  try {
    const values = (await output.data()) as Float32Array;
    eyes.forEach(([face], k) => {
      const gap = lidGap(values.subarray(k * POINT_VALUES));
      openness[face] = Math.min(openness[face] ?? Infinity, gap);
    });
    return openness;
  } finally {
    tf.dispose(output);
  }
}

/** The square crop [top, left, bottom, right] (fractions of the frame) about an eye's corners, if it lies in the frame. */
function eyeBox(a: Point | undefined, b: Point | undefined, frame: RgbImage): [number, number, number, number] | undefined {
  if (!a || !b) return undefined;
  const half = (CROP_SCALE * Math.hypot(a[0] - b[0], a[1] - b[1])) / 2;
  const cx = (a[0] + b[0]) / 2, cy = (a[1] + b[1]) / 2;
  if (half < 2 || cx - half < 0 || cy - half < 0 || cx + half > frame.width || cy + half > frame.height) return undefined;
  return [(cy - half) / frame.height, (cx - half) / frame.width, (cy + half) / frame.height, (cx + half) / frame.width];
}

/** The mean gap between the lids over the corners' distance, from one eye's model output (x, y, z per point). */
function lidGap(points: Float32Array): number {
  const distance = (i: number, j: number) => Math.hypot(points[3 * i]! - points[3 * j]!, points[3 * i + 1]! - points[3 * j + 1]!);
  const gap = LID_PAIRS.reduce((sum, [upper, lower]) => sum + distance(upper, lower), 0) / LID_PAIRS.length;
  return gap / Math.max(1e-6, distance(...CORNERS));
}

// Readings at or below SHUT lower the drawn lids fully, at or above OPEN not at all: the test
// footage's downcast eyes read 0.05-0.13 on most frames (its bowed, hair-covered face up to 0.15,
// then lowered by 0.7), its open ones 0.23-0.45 (a laughing face's narrowed eye down to 0.16, which is
// then drawn partly as the footage has it).
const SHUT = 0.13;
const OPEN = 0.2;

/** How far lids read as `openness` are lowered: 0 for open eyes, 1 for eyes looking down or shut. */
export function lidsLowered(openness: number): number {
  return Math.max(0, Math.min(1, (OPEN - openness) / (OPEN - SHUT)));
}
