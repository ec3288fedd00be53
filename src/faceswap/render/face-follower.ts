import type { Human, Point } from "@vladmandic/human";
import { detectAfresh, detectBoxes } from "./human.js";
import { cropAround, meshedFromOwnCrops } from "./own-crop.js";
import { iou, pairByOverlap, SAME_FACE } from "./tracker.js";
import { meshCrops, roll, UPRIGHT_ROLL, UprightMesher, type MeshCrop, type MeshFrame } from "./upright.js";

/**
 * A face as the follower reports it: its crop's box clamped to the frame (0.7-1.2 times the side of
 * Human's box for the same face on the test photos; the tracker's smoothing and the matching of
 * embeddings read it, and their tests hold with it), the mesh's confidence, and its points in frame
 * pixels.
 */
export interface FollowedFace {
  box: [number, number, number, number];
  score: number;
  mesh: Point[];
}

interface Followed {
  /** The crop the next frame meshes the face from: about its last mesh, sized on the last detection's frame (see cropAround and `own`). */
  crop: MeshCrop;
  /** The crop its last mesh gives, sized from it: what a detection that finds no new face meshes it from. */
  own: MeshCrop;
  /** Whether its crop is sized from its own mesh rather than from the detector's box (which only a full detection sizes anew). */
  ownSize: boolean;
  box: [number, number, number, number];
  /** The box of `own`, sized afresh on every meshed frame. */
  extent: [number, number, number, number];
  roll: number;
}

/**
 * A squared difference per sample (0-255 values) past which a frame counts as a new scene and the
 * detector runs at once; Human's own measure and threshold for reusing the previous frame's boxes.
 */
const NEW_SCENE = 0.7;
const SCENE_STRIDE = 4;
/**
 * Detections that find only faces followed, or boxes the last full one passed over, after which the
 * next is full all the same: a face the mesh model did not read as one at first (turned away, cut by
 * the frame's edge) is looked at again within a few seconds.
 */
const FULL_DETECTION_EVERY = 4;

/**
 * Finds the faces of one worker's share of a render's frames. The detector runs on the first frame,
 * then on every (skipFrames + 1)-th, on a new scene, and whenever no face is left; in between, each
 * face is meshed from a crop about its mesh in the frame before, all of a frame's faces in one call of
 * the mesh model, and a rolled head from a crop turned upright at once (see UprightMesher). This is
 * what Human does between detections, except that Human sizes the crop from the detector's box rather
 * than the face's own mesh (see cropAround) and meshes each face by itself and unturned; a rolled face
 * then had to be meshed a second time, upright: two meshes of five were thrown away, and calls one face
 * at a time cost half as much again as one call for all. A detection that finds only the faces
 * followed already meshes them the same way (see detectAgain).
 *
 * The state is the render's own, never the worker's: Human keeps one set of boxes for whatever it
 * looked at last, so renders sharing a worker, or an embedding asked for between two frames, could
 * change which frames were detected afresh and so the output.
 */
export class FaceFollower {
  private followed: Followed[] = [];
  private sinceDetection = 0;
  /** Detections since the last full one (see detectAgain). */
  private sinceFull = 0;
  /** Boxes the detector found on the last full detection's frame that did not become a face followed. */
  private passedOver: Array<[number, number, number, number]> = [];
  private previous: Uint8Array | undefined;
  private readonly upright: UprightMesher;
  private readonly skipFrames: number;

  constructor(
    private readonly human: Human,
    private readonly mirror: Int32Array,
    private readonly minConfidence: number,
  ) {
    this.upright = new UprightMesher(human, mirror);
    this.skipFrames = human.config.face.detector?.skipFrames ?? 0;
  }

  /**
   * The faces of the next frame of this share; without `mesh`, nothing (null) unless the frame begins
   * a new scene: its faces are then drawn from the meshed frames around it (see facesBetween), and a
   * new scene's cannot be.
   */
  async faces(frame: MeshFrame): Promise<FollowedFace[]>;
  async faces(frame: MeshFrame, mesh: boolean): Promise<FollowedFace[] | null>;
  async faces(frame: MeshFrame, mesh = true): Promise<FollowedFace[] | null> {
    const newScene = this.changed(frame.pixels);
    if (!mesh && !newScene) return null;
    if (this.followed.length === 0 || newScene) return this.detect(frame);
    if (this.sinceDetection >= this.skipFrames) return this.detectAgain(frame);
    this.sinceDetection++;
    return this.follow(frame);
  }

  /**
   * The faces' extents on this share's last meshed frame (see Followed.extent): unlike the boxes
   * reported, whose size holds from one detection to the next and then steps, they grow and shrink
   * with the faces.
   */
  get extents(): Array<[number, number, number, number]> {
    return this.followed.map((face) => face.extent);
  }

  /**
   * A detection after the first. When the detector finds only the faces followed already, each paired
   * with a box of its own (and boxes the last full detection passed over), they are meshed as between
   * detections, all in one call, each from the crop its last mesh gives (see Followed.own),
   * rather than by Human one at a time, again upright and again from their own crops, which cost more
   * than the detector itself. A face the detector no longer finds is dropped, as a full detection
   * drops it. A box paired with no face, a face whose crop keeps Human's size, or the
   * FULL_DETECTION_EVERY-th detection in a row has the frame detected afresh.
   */
  private async detectAgain(frame: MeshFrame): Promise<FollowedFace[]> {
    const boxes = await detectBoxes(this.human, frame.tensor(), this.minConfidence);
    const paired = pairByOverlap(boxes, this.followed.map((face) => face.box));
    const known = this.followed.filter((_, k) => paired.includes(k));
    const unknown = boxes.some((box, i) => paired[i] === undefined && !this.passedOver.some((passed) => iou(box, passed) >= SAME_FACE));
    if (unknown || known.some((face) => !face.ownSize) || ++this.sinceFull >= FULL_DETECTION_EVERY) {
      const found = await this.detect(frame);
      this.passedOver = boxes.filter((box) => !found.some((face) => iou(box, face.box) >= SAME_FACE));
      return found;
    }
    this.sinceDetection = 0;
    this.followed = known.map((face) => ({ ...face, crop: face.own }));
    return this.follow(frame);
  }

  private async detect(frame: MeshFrame): Promise<FollowedFace[]> {
    this.sinceFull = 0;
    this.passedOver = [];
    const meshed = await detectAfresh(this.human, frame.tensor(), { minConfidence: this.minConfidence, describe: false });
    const upright = await this.upright.meshes(frame, meshed, this.minConfidence, this.followed);
    this.sinceDetection = 0;
    // Meshed again from crops sized as the later frames' are, so a detection moves the mesh less.
    const first = meshed.map((face, i) => ({ score: face.score, mesh: upright[i]!.mesh ?? face.mesh, roll: upright[i]!.roll }));
    const again = await meshedFromOwnCrops(this.human, frame, first, this.mirror, this.minConfidence);
    const found: FollowedFace[] = [];
    this.followed = [];
    for (const [i, face] of again.entries()) {
      const { mesh, roll: faceRoll } = face.ownCrop ? await this.uprightIfRolled(frame, face, Math.abs(first[i]!.roll) > UPRIGHT_ROLL) : face;
      const own = cropAround(mesh, faceRoll);
      // A face its own crop does not show as one keeps Human's crop size: the next frame would cut
      // that crop again and lose the face.
      const crop = face.ownCrop ? own : { ...own, width: meshed[i]!.boxRaw[2] * frame.width, height: meshed[i]!.boxRaw[3] * frame.height };
      const followed = followedFace(crop, own, face.ownCrop, faceRoll, frame);
      this.followed.push(followed);
      // Human keeps a box scored exactly at the bound but reports only faces above it.
      if (face.score > this.minConfidence) found.push({ box: followed.box, score: face.score, mesh });
    }
    return found;
  }

  private async follow(frame: MeshFrame): Promise<FollowedFace[]> {
    const crops = this.followed.map(({ crop }) => crop);
    const meshed = await meshCrops(this.human, frame, crops);
    const found: FollowedFace[] = [];
    const followed: Followed[] = [];
    for (const [k, { crop, ownSize }] of this.followed.entries()) {
      let { score, mesh: read } = meshed[k]!;
      let turned = crop.angle !== 0;
      if (turned && score < this.minConfidence) {
        // Turned, the crop no longer reads as a face (the head straightened fast, or turned away):
        // meshed unturned, as on a frame the detector ran on.
        ({ score, mesh: read } = (await meshCrops(this.human, frame, [{ ...crop, angle: 0 }]))[0]!);
        turned = false;
      }
      score = Math.round(100 * score) / 100;
      if (score < this.minConfidence) continue;
      const { mesh, roll: faceRoll } = await this.uprightIfRolled(frame, { mesh: read, roll: roll(read, this.mirror) }, turned);
      // The size found on the detection's frame is kept, as Human keeps its own: the mesh's jitter
      // then moves the next crop but never scales it, and the meshes meet face-api's landmarks as
      // closely as with a crop sized afresh on every frame (the test clips' means within 0.002).
      const own = cropAround(mesh, faceRoll);
      const face = followedFace({ ...own, width: crop.width, height: crop.height }, own, ownSize, faceRoll, frame);
      followed.push(face);
      // Human keeps a box scored exactly at the bound but reports only faces above it.
      if (score > this.minConfidence) found.push({ box: face.box, score, mesh });
    }
    this.followed = followed;
    return found;
  }

  /**
   * `face` as read from a crop, `turned` or not: a head that has begun to roll in an unturned crop is
   * meshed again upright as a face new to the render would be, from a crop about where it is now.
   */
  private async uprightIfRolled(frame: MeshFrame, face: { mesh: Point[]; roll: number }, turned: boolean): Promise<{ mesh: Point[]; roll: number }> {
    if (turned || Math.abs(face.roll) <= UPRIGHT_ROLL) return face;
    const upright = await this.upright.turned(frame, cropAround(face.mesh, face.roll), this.minConfidence);
    return { mesh: upright.mesh ?? face.mesh, roll: upright.roll };
  }

  /** Whether `pixels` differ from the previous frame's as a new scene does; keeps a copy for the next. */
  private changed(pixels: Uint8Array): boolean {
    const previous = this.previous;
    if (previous?.length !== pixels.length) {
      this.previous = Uint8Array.from(pixels);
      return true;
    }
    // Every SCENE_STRIDE-th sample (each channel in turn) tells a new scene as well as all of them.
    let sum = 0, samples = 0;
    for (let i = 0; i < pixels.length; i += SCENE_STRIDE, samples++) {
      const d = pixels[i]! - previous[i]!;
      sum += d * d;
    }
    previous.set(pixels);
    return sum / samples / 255 > NEW_SCENE;
  }
}

/** A face followed from `crop` on, whose last mesh gives `own` (see Followed). */
function followedFace(crop: MeshCrop, own: MeshCrop, ownSize: boolean, roll: number, frame: { width: number; height: number }): Followed {
  return { crop, own, ownSize, box: boxOf(crop, frame), extent: boxOf(own, frame), roll };
}

/** The box a crop reports the face in: the crop unturned, clamped to the frame. */
function boxOf(crop: MeshCrop, frame: { width: number; height: number }): [number, number, number, number] {
  return clampBox(crop.cx - crop.width / 2, crop.cy - crop.height / 2, crop.width, crop.height, frame.width, frame.height);
}

/** Human's clamped box: whole pixels inside the frame. */
function clampBox(x: number, y: number, w: number, h: number, width: number, height: number): [number, number, number, number] {
  const x0 = Math.max(0, x), y0 = Math.max(0, y);
  return [Math.trunc(x0), Math.trunc(y0), Math.trunc(Math.min(width, x + w) - x0), Math.trunc(Math.min(height, y + h) - y0)];
}
