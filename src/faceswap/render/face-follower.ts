import type { Human, Point } from "@vladmandic/human";
import { detectAfresh } from "./human.js";
import { meshCrops, roll, UPRIGHT_ROLL, UprightMesher, type MeshCrop, type MeshFrame } from "./upright.js";

/** A face as the follower reports it: Human's clamped box, the mesh's confidence, and its points in frame pixels. */
export interface FollowedFace {
  box: [number, number, number, number];
  score: number;
  mesh: Point[];
}

interface Followed {
  /** The crop the next frame meshes the face from: the detector's box size, centred on the last mesh. */
  crop: Omit<MeshCrop, "angle">;
  box: [number, number, number, number];
  roll: number;
}

/**
 * A squared difference per sample (0-255 values) past which a frame counts as a new scene and the
 * detector runs at once; Human's own measure and threshold for reusing the previous frame's boxes.
 */
const NEW_SCENE = 0.7;
const SCENE_STRIDE = 4;

/**
 * Finds the faces of one worker's share of a render's frames. The detector runs on the first frame,
 * then on every (skipFrames + 1)-th, on a new scene, and whenever no face is left; in between, each
 * face is meshed from a crop about where its mesh was in the frame before, all of a frame's faces in
 * one call of the mesh model, and a rolled head from a crop turned upright at once (see UprightMesher).
 * This is what Human does between detections, except that Human meshed each face by itself and
 * unturned, and a rolled face was then meshed a second time, upright: two meshes of five were thrown
 * away, and calls one face at a time cost half as much again as one call for all.
 *
 * The state is the render's own, never the worker's: Human keeps one set of boxes for whatever it
 * looked at last, so renders sharing a worker, or an embedding asked for between two frames, could
 * change which frames were detected afresh and so the output.
 */
export class FaceFollower {
  private followed: Followed[] = [];
  private sinceDetection = 0;
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
    if (this.followed.length === 0 || newScene || this.sinceDetection >= this.skipFrames) return this.detect(frame);
    this.sinceDetection++;
    return this.follow(frame);
  }

  /** The boxes of the faces as this share's last meshed frame had them. */
  get boxes(): Array<[number, number, number, number]> {
    return this.followed.map((face) => face.box);
  }

  private async detect(frame: MeshFrame): Promise<FollowedFace[]> {
    const meshed = await detectAfresh(this.human, frame.tensor(), { minConfidence: this.minConfidence, describe: false });
    const upright = await this.upright.meshes(frame, meshed, this.minConfidence, this.followed);
    this.sinceDetection = 0;
    this.followed = meshed.map((face, i) => {
      // Human's crop size; centred, as Human centres its next one, on the mesh's bounds.
      const [cx, cy] = centreOf(upright[i]!.mesh ?? face.mesh);
      return { crop: { cx, cy, width: face.boxRaw[2] * frame.width, height: face.boxRaw[3] * frame.height }, box: face.box, roll: upright[i]!.roll };
    });
    return meshed.map((face, i) => ({ box: face.box, score: face.score, mesh: upright[i]!.mesh ?? face.mesh }));
  }

  private async follow(frame: MeshFrame): Promise<FollowedFace[]> {
    const crops = this.followed.map(({ crop, roll }) => ({ ...crop, angle: Math.abs(roll) > UPRIGHT_ROLL ? roll : 0 }));
    const meshed = await meshCrops(this.human, frame, crops);
    const found: FollowedFace[] = [];
    const followed: Followed[] = [];
    for (const [k, crop] of crops.entries()) {
      let { score, mesh } = meshed[k]!;
      let turned = crop.angle !== 0;
      if (turned && score < this.minConfidence) {
        // Turned, the crop no longer reads as a face (the head straightened fast, or turned away):
        // meshed unturned, as on a frame the detector ran on.
        ({ score, mesh } = (await meshCrops(this.human, frame, [{ ...crop, angle: 0 }]))[0]!);
        turned = false;
      }
      score = Math.round(100 * score) / 100;
      if (score < this.minConfidence) continue;
      let faceRoll = roll(mesh, this.mirror);
      if (!turned && Math.abs(faceRoll) > UPRIGHT_ROLL) {
        // A head that has begun to roll is turned upright as a face new to the render would be, from a
        // crop centred on where it is now.
        const [cx, cy] = centreOf(mesh);
        const upright = await this.upright.turned(frame, { ...crop, cx, cy, angle: faceRoll }, this.minConfidence);
        mesh = upright.mesh ?? mesh;
        faceRoll = upright.roll;
      }
      const [cx, cy] = centreOf(mesh);
      const box = clampBox(cx - crop.width / 2, cy - crop.height / 2, crop.width, crop.height, frame.width, frame.height);
      followed.push({ crop: { cx, cy, width: crop.width, height: crop.height }, box, roll: faceRoll });
      // Human keeps a box scored exactly at the bound but reports only faces above it.
      if (score > this.minConfidence) found.push({ box, score, mesh });
    }
    this.followed = followed;
    return found;
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

/** The centre of the points' bounding box. */
function centreOf(mesh: readonly Point[]): [number, number] {
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  for (const [x, y] of mesh) {
    minX = Math.min(minX, x); maxX = Math.max(maxX, x);
    minY = Math.min(minY, y); maxY = Math.max(maxY, y);
  }
  return [minX + (maxX - minX) / 2, minY + (maxY - minY) / 2];
}

/** Human's clamped box: whole pixels inside the frame. */
function clampBox(x: number, y: number, w: number, h: number, width: number, height: number): [number, number, number, number] {
  const x0 = Math.max(0, x), y0 = Math.max(0, y);
  return [Math.trunc(x0), Math.trunc(y0), Math.trunc(Math.min(width, x + w) - x0), Math.trunc(Math.min(height, y + h) - y0)];
}
