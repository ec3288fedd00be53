import type { FaceResult, Human, Point, Tensor } from "@vladmandic/human";
import { iou } from "./tracker.js";

type Tf = typeof import("@tensorflow/tfjs-core");
type Tensor4D = import("@tensorflow/tfjs-core").Tensor4D;

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
 * Meshes rolled heads again from crops turned upright, and only the part of the frame the turned
 * box reaches is turned. An unturned crop shows the mesh model only part of a head's roll; a crop
 * turned by that part shows it part of the rest, so a face new to the render is turned up to PASSES
 * times, and in a video a rolled face is turned at once by the roll its mesh had in the last frame
 * this mesher saw (a box overlapping it), which the next frames refine. One mesher serves one
 * worker's share of a render's frames (every RENDER_THREADS-th frame), so that frame is a few back.
 */
export class UprightMesher {
  /** Box and roll of each face of the previous frame (videos only). */
  private previous: Array<{ box: readonly number[]; roll: number }> = [];

  constructor(
    private readonly human: Human,
    private readonly mirror: Int32Array,
    private readonly video: boolean,
  ) {}

  /**
   * For each of `faces` (found unturned in `frame`, an int32 [height, width, 3] tensor), its mesh
   * from a crop turned upright, or undefined where it is not rolled past UPRIGHT_ROLL or the mesh
   * model does not score the turned crop a face of `minConfidence`.
   */
  async meshes(frame: Tensor, faces: readonly FaceResult[], minConfidence: number): Promise<Array<Point[] | undefined>> {
    const found: Array<Point[] | undefined> = [];
    const seen: Array<{ box: readonly number[]; roll: number }> = [];
    for (const face of faces) {
      // A roll carried from the previous frame starts the turn only while it is past UPRIGHT_ROLL; once
      // a head straightens (or before it first tilts) the frame's own reading decides, or a face that
      // entered level would stay unturned for the rest of its track.
      const known = this.previous.find((p) => iou(p.box, face.box) > 0.3);
      const carried = known !== undefined && Math.abs(known.roll) > UPRIGHT_ROLL;
      let angle = carried ? known.roll : roll(face.mesh, this.mirror);
      let mesh: Point[] | undefined;
      for (let pass = 0; pass < (carried ? 1 : PASSES) && Math.abs(angle) > UPRIGHT_ROLL; pass++) {
        const turned = await this.meshTurned(frame, face, angle, minConfidence);
        if (!turned) break;
        mesh = turned;
        angle = roll(turned, this.mirror);
      }
      found.push(mesh);
      seen.push({ box: face.box, roll: angle });
    }
    if (this.video) this.previous = seen;
    return found;
  }

  /** The mesh of `face` from the crop of its box turned by `angle` about its centre. */
  private async meshTurned(frame: Tensor, face: FaceResult, angle: number, minConfidence: number): Promise<Point[] | undefined> {
    const model = this.human.models.models.facemesh;
    if (!model) throw new Error("the face mesh model is not loaded");
    const tf = this.human.tf as Tf;
    const size = model.inputs[0]!.shape![2]!;
    const [height, width] = frame.shape as [number, number, number];
    // Human's box of the face after meshing (its crop's size, centred on the mesh), unclamped: it may
    // reach past the frame.
    const bw = face.boxRaw[2] * width, bh = face.boxRaw[3] * height;
    const cx = face.boxRaw[0] * width + bw / 2, cy = face.boxRaw[1] * height + bh / 2;
    const reach = Math.ceil(Math.hypot(bw, bh) / 2) + 1;
    const x0 = Math.max(0, Math.floor(cx - reach)), y0 = Math.max(0, Math.floor(cy - reach));
    const pw = Math.min(width, Math.ceil(cx + reach)) - x0, ph = Math.min(height, Math.ceil(cy + reach)) - y0;
    if (pw < 2 || ph < 2) return undefined;
    const [confidence, coords] = tf.tidy(() => {
      const part = tf.expandDims(tf.cast(tf.slice(frame as never, [y0, x0, 0], [ph, pw, 3]), "float32"), 0) as Tensor4D;
      const turned = tf.image.rotateWithOffset(part, angle, 0, [(cx - x0) / pw, (cy - y0) / ph]);
      const box = [[(cy - bh / 2 - y0) / ph, (cx - bw / 2 - x0) / pw, (cy + bh / 2 - y0) / ph, (cx + bw / 2 - x0) / pw]];
      const crop = tf.div(tf.image.cropAndResize(turned, box, [0], [size, size], "bilinear"), 255);
      const outputs = model.execute(crop) as import("@tensorflow/tfjs-core").Tensor[];
      return [outputs.find((t) => t.shape.at(-1) === 1)!, outputs.find((t) => t.shape.at(-1) === 1404)!];
    });
    try {
      if ((await confidence.data())[0]! < minConfidence) return undefined;
      const raw = await coords.data();
      // From the turned crop's pixels back to the frame's: scaled about the box's centre, turned back.
      const cos = Math.cos(angle), sin = Math.sin(angle);
      const mesh: Point[] = [];
      for (let i = 0; i < raw.length / 3; i++) {
        const x = (bw / size) * (raw[3 * i]! - size / 2), y = (bh / size) * (raw[3 * i + 1]! - size / 2);
        mesh.push([cx + cos * x - sin * y, cy + sin * x + cos * y, raw[3 * i + 2]!]);
      }
      return mesh;
    } finally {
      tf.dispose([confidence, coords]);
    }
  }
}
