import type { FaceResult, Human, Point, Tensor } from "@vladmandic/human";
import type { RgbImage } from "./images.js";
import { cropAndResize, rotateWithOffset, rowsRead } from "./resample.js";
import { iou } from "./tracker.js";

type Tf = typeof import("@tensorflow/tfjs-core");
type TfTensor = import("@tensorflow/tfjs-core").Tensor;

/**
 * Roll (radians) past which a face is meshed again from a crop turned upright. The mesh model, given
 * an unturned crop, placed a head rolled by 44 degrees a lid's height below its eyes and beside
 * its mouth. Human's own detector rotation is no answer: it turns the whole frame for each face (17 %
 * of a worker at 1080 px) and judges the tilt by the line from the mouth to between the eyes, which a
 * head turned to the side and looking down leans too: meshed turned so, the pan's left face's mesh
 * stopped short of its far cheek, and its make-up and lips showed past the new face. The lines
 * across the face (see roll) stay level on a turned head. The bound is on the reading from an
 * unturned crop, where the model sees about half of a roll: a face new to the render is turned from
 * about 20 degrees of real roll. Read on the eye line so, the pan's left face rolled by 0-3 degrees (10
 * on one frame), its middle and right ones by 14-23 and the turned clip's faces by 14-19; turned until
 * the reading settled, by 29 and 44, and 25 and 29.
 */
export const UPRIGHT_ROLL = (10 * Math.PI) / 180;

/** Turns of a crop per face at most: the model reads part of the roll left in a turned crop too. */
const PASSES = 2;

/**
 * The head's roll, in Human's sense (the angle to turn the frame by, about the face, to bring it
 * upright): the direction of the sum of the lines joining each mesh point to its mirror image
 * (`mirror`, see mirrorPoints), each pointing to the image's right. Averaged so, it holds where
 * something in front of one eye moves that eye's points.
 */
export function roll(mesh: readonly Point[], mirror: Int32Array): number {
  let dx = 0, dy = 0;
  for (let i = 0; i < mesh.length; i++) {
    const a = mesh[i], b = mesh[mirror[i]!];
    if (!a || !b) continue;
    const sign = b[0] >= a[0] ? 1 : -1;
    dx += sign * (b[0] - a[0]);
    dy += sign * (b[1] - a[1]);
  }
  return Math.atan2(dy, dx);
}

/**
 * A frame as the mesh crops and Human read it: its rgb24 bytes, and a [height, width, 3] tensor of
 * them made on the first call (only Human's own searches need one).
 */
export interface MeshFrame extends RgbImage {
  tensor(): Tensor;
}

/** A face's crop for the mesh model: a box (frame pixels) about its centre, turned by `angle` first. */
export interface MeshCrop {
  cx: number;
  cy: number;
  width: number;
  height: number;
  angle: number;
}

/** The mesh model's answer for one crop: its confidence that the crop holds a face, and the face's points in frame pixels. */
export interface CropMesh {
  score: number;
  mesh: Point[];
}

/**
 * The mesh model run once over the crops of several faces. One call for all of a frame's faces costs
 * a little over half what a call per face did (17 against 29 ms for three faces at 192 px), most of a
 * call being the same weights read and the same kernels dispatched whatever the batch. An unturned
 * crop is cut from the frame as Human cuts its own, and its points are whole pixels, as Human's are.
 */
export async function meshCrops(human: Human, frame: MeshFrame, crops: readonly MeshCrop[]): Promise<CropMesh[]> {
  const model = human.models.models.facemesh;
  if (!model) throw new Error("the face mesh model is not loaded");
  const tf = human.tf as Tf;
  const size = model.inputs[0]!.shape![2]!;
  const { width, height } = frame;
  const usable = crops.map((crop) => crop.width >= 2 && crop.height >= 2 && reach(crop, width, height) !== undefined);
  if (!usable.includes(true)) return crops.map(() => ({ score: 0, mesh: [] }));
  const [confidence, coords] = tf.tidy(() => {
    const batch = [...crops.keys()].filter((k) => usable[k]).map((k) => cropOf(tf, frame, crops[k]!, size));
    const outputs = model.execute(batch.length === 1 ? batch[0]! : tf.concat(batch, 0)) as TfTensor[];
    return [outputs.find((t) => t.shape.at(-1) === 1)!, outputs.find((t) => t.shape.at(-1) === 1404)!];
  });
  try {
    const [scores, raw] = [await confidence.data(), (await coords.data()) as Float32Array];
    let row = 0;
    return crops.map((crop, k) => {
      if (!usable[k]) return { score: 0, mesh: [] };
      const points = raw.subarray(row * 1404, (row + 1) * 1404);
      return { score: scores[row++]!, mesh: toFrame(points, crop, size) };
    });
  } finally {
    tf.dispose([confidence, coords]);
  }
}

/** The part of the frame a turned crop reaches: a square about its centre, clamped to the frame. */
function reach(crop: MeshCrop, width: number, height: number): { x0: number; y0: number; w: number; h: number } | undefined {
  const half = Math.ceil(Math.hypot(crop.width, crop.height) / 2) + 1;
  const x0 = Math.max(0, Math.floor(crop.cx - half)), y0 = Math.max(0, Math.floor(crop.cy - half));
  const w = Math.min(width, Math.ceil(crop.cx + half)) - x0, h = Math.min(height, Math.ceil(crop.cy + half)) - y0;
  return w < 2 || h < 2 ? undefined : { x0, y0, w, h };
}

/** The mesh or hand model's [1, size, size, 3] input: `box` of `image` (see cropAndResize), in 0..1. */
export function modelInput(tf: Tf, image: RgbImage, box: readonly [number, number, number, number], size: number): TfTensor {
  return tf.div(tf.tensor4d(cropAndResize(image, box, size), [1, size, size, 3]), 255);
}

/** The [1, size, size, 3] input of one crop, in 0..1. */
function cropOf(tf: Tf, frame: MeshFrame, crop: MeshCrop, size: number): TfTensor {
  const { width, height } = frame;
  const { cx, cy, width: bw, height: bh } = crop;
  if (crop.angle === 0) {
    const box = [(cy - bh / 2) / height, (cx - bw / 2) / width, (cy + bh / 2) / height, (cx + bw / 2) / width] as const;
    return modelInput(tf, frame, box, size);
  }
  // Only the part of the frame the turned box reaches is turned, and of that only the rows the crop reads.
  const { x0, y0, w, h } = reach(crop, width, height)!;
  const box = [(cy - bh / 2 - y0) / h, (cx - bw / 2 - x0) / w, (cy + bh / 2 - y0) / h, (cx + bw / 2 - x0) / w] as const;
  // The centre as tfjs made it from the fractions the kernel was once given: the same to the bit.
  const centre = [w * ((cx - x0) / w), h * ((cy - y0) / h)] as const;
  const turned = rotateWithOffset(frame, { x0, y0, width: w, height: h }, crop.angle, centre, rowsRead(box, h));
  return modelInput(tf, turned, box, size);
}

/** From the crop's pixels back to the frame's: scaled about the box's centre, turned back. */
function toFrame(raw: Float32Array, crop: MeshCrop, size: number): Point[] {
  const sx = crop.width / size, sy = crop.height / size;
  const cos = Math.cos(crop.angle), sin = Math.sin(crop.angle);
  const mesh: Point[] = [];
  for (let i = 0; i < raw.length / 3; i++) {
    const x = sx * (raw[3 * i]! - size / 2), y = sy * (raw[3 * i + 1]! - size / 2);
    if (crop.angle === 0) mesh.push([Math.trunc(crop.cx + x), Math.trunc(crop.cy + y), Math.trunc(raw[3 * i + 2]!)]);
    else mesh.push([crop.cx + cos * x - sin * y, crop.cy + sin * x + cos * y, raw[3 * i + 2]!]);
  }
  return mesh;
}

/** A rolled face's crop box: Human's box of the face after meshing (its crop's size, centred on its mesh), unclamped. */
function cropOfFace(face: FaceResult, width: number, height: number, angle: number): MeshCrop {
  const bw = face.boxRaw[2] * width, bh = face.boxRaw[3] * height;
  return { cx: face.boxRaw[0] * width + bw / 2, cy: face.boxRaw[1] * height + bh / 2, width: bw, height: bh, angle };
}

/** A face's roll after meshing, with its upright mesh where it was meshed again. */
export interface UprightFace {
  mesh: Point[] | undefined;
  roll: number;
}

/**
 * Meshes rolled heads again from crops turned upright. An unturned crop shows the mesh model only
 * part of a head's roll; a crop turned by that part shows it part of the rest, so a face new to the
 * render is turned up to PASSES times, while in a video a rolled face is turned at once by the roll
 * its mesh had in the previous frame (a box overlapping it), which the next frames refine.
 */
export class UprightMesher {
  constructor(
    private readonly human: Human,
    private readonly mirror: Int32Array,
  ) {}

  /**
   * For each of `faces` (found unturned in `frame`), its roll and
   * its mesh from a crop turned upright, or no mesh where it is not rolled past UPRIGHT_ROLL or the
   * mesh model does not score the turned crop a face of `minConfidence`. `previous`: the boxes and
   * rolls of the faces in the video's previous frame.
   */
  async meshes(
    frame: MeshFrame,
    faces: readonly FaceResult[],
    minConfidence: number,
    previous: ReadonlyArray<{ box: readonly number[]; roll: number }> = [],
  ): Promise<UprightFace[]> {
    const { width, height } = frame;
    const found: UprightFace[] = [];
    for (const face of faces) {
      // A roll carried from the previous frame starts the turn only while it is past UPRIGHT_ROLL; once
      // a head straightens (or before it first tilts) the frame's own reading decides, or a face that
      // entered level would stay unturned for the rest of its track.
      const known = previous.find((p) => iou(p.box, face.box) > 0.3);
      const carried = known !== undefined && Math.abs(known.roll) > UPRIGHT_ROLL;
      const crop = cropOfFace(face, width, height, carried ? known.roll : roll(face.mesh, this.mirror));
      found.push(await this.turned(frame, crop, minConfidence, carried ? 1 : PASSES));
    }
    return found;
  }

  /**
   * The face in `crop` meshed upright: turned by the crop's angle, then by what its mesh still reads,
   * up to `passes` times, while that reading is past UPRIGHT_ROLL.
   */
  async turned(frame: MeshFrame, crop: MeshCrop, minConfidence: number, passes = PASSES): Promise<UprightFace> {
    let angle = crop.angle;
    let mesh: Point[] | undefined;
    for (let pass = 0; pass < passes && Math.abs(angle) > UPRIGHT_ROLL; pass++) {
      const [turned] = await meshCrops(this.human, frame, [{ ...crop, angle }]);
      if (turned!.score < minConfidence) break;
      mesh = turned!.mesh;
      angle = roll(mesh, this.mirror);
    }
    return { mesh, roll: angle };
  }
}
