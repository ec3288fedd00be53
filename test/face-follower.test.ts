import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Human, Point } from "@vladmandic/human";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FaceFollower, type FollowedFace } from "../src/faceswap/render/face-follower.js";
import { detectAfresh, loadHuman } from "../src/faceswap/render/human.js";
import { decodeFrames, type RgbImage } from "../src/faceswap/render/images.js";
import { mirrorPoints } from "../src/faceswap/render/mirror.js";
import { iou } from "../src/faceswap/render/tracker.js";
import { roll, UPRIGHT_ROLL } from "../src/faceswap/render/upright.js";
import { makeClip, samplePhoto } from "./support/footage.js";
import { faceApiLandmarks } from "./support/recognition.js";

let dir: string;
let human: Human;
let mirror: Int32Array;
/** One worker's share of sample1's pan (every other frame): three faces, two of them rolled. */
let frames: RgbImage[];
/** sample4's pan: four other faces, elsewhere in the frame. */
let otherScene: RgbImage[];
/** sample2 (every other frame): the middle face looks down, hair falling over its brow. */
let sofa: RgbImage[];

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "face-follower-test-"));
  const [clip, other, downcast] = await Promise.all([
    makeClip(path.join(dir, "people.mp4"), { seconds: 1.2, fps: 25, width: 576 }),
    makeClip(path.join(dir, "other-people.mp4"), { seconds: 0.4, fps: 25, width: 576, photo: samplePhoto(4) }),
    makeClip(path.join(dir, "sofa.mp4"), { seconds: 1.2, fps: 10, width: 576, photo: samplePhoto(2) }),
  ]);
  [human, { frames }, { frames: otherScene }, { frames: sofa }] = await Promise.all([
    loadHuman(),
    decodeFrames(clip, { maxLongSide: 576, maxFrames: 30 }),
    decodeFrames(other, { maxLongSide: 576, maxFrames: 10 }),
    decodeFrames(downcast, { maxLongSide: 576, maxFrames: 12 }),
  ]);
  mirror = mirrorPoints(human.faceUVMap);
  frames = frames.filter((_, k) => k % 2 === 0);
  sofa = sofa.filter((_, k) => k % 2 === 0);
});

afterAll(async () => {
  await fs.rm(dir, { recursive: true, force: true });
});

/** The faces Human finds afresh, each meshed from Human's crop: 1.4 times the detector's box. */
async function humanFaces(image: RgbImage) {
  const tensor = human.tf.tensor3d(image.pixels, [image.height, image.width, 3], "int32");
  try {
    return await detectAfresh(human, tensor, { minConfidence: 0.3, describe: false });
  } finally {
    human.tf.dispose(tensor);
  }
}

/** face-api's landmarks (dlib's order) and the mesh's points at the same features: eye corners, nose tip, mouth corners, chin. */
const SAME_FEATURE: ReadonlyArray<readonly [number, number]> = [[36, 33], [39, 133], [42, 362], [45, 263], [30, 4], [48, 61], [54, 291], [8, 152]];

/** The distance between the outer eye corners of face-api's `landmarks`. */
function eyeDistance(landmarks: Float32Array): number {
  return Math.hypot(landmarks[2 * 36]! - landmarks[2 * 45]!, landmarks[2 * 36 + 1]! - landmarks[2 * 45 + 1]!);
}

/** The farthest a feature of `mesh` lies from face-api's `landmarks` of it, over their eye distance. */
function apart(landmarks: Float32Array, mesh: readonly Point[]): number {
  const eyes = eyeDistance(landmarks);
  return Math.max(...SAME_FEATURE.map(([l, m]) => Math.hypot(landmarks[2 * l]! - mesh[m]![0], landmarks[2 * l + 1]! - mesh[m]![1]) / eyes));
}

async function followed(follower: FaceFollower, image: RgbImage): Promise<FollowedFace[]> {
  const tensor = human.tf.tensor3d(image.pixels, [image.height, image.width, 3], "int32");
  try {
    return await follower.faces({ ...image, tensor: () => tensor });
  } finally {
    human.tf.dispose(tensor);
  }
}

describe("face follower", () => {
  it("meshes no face farther than Human does (by 0.03 of the eye distance) from where a landmark model trained apart puts its features, a face looking down far nearer, and a rolled one upright", { timeout: 120_000 }, async () => {
    const report: string[] = [];
    const downcast: Array<[number, number]> = [];
    let rolled = 0;
    for (const [name, clipFrames] of [["pan", frames], ["sofa", sofa]] as const) {
      const follower = new FaceFollower(human, mirror, 0.3);
      for (const [k, image] of clipFrames.entries()) {
        const found = await followed(follower, image);
        const reference = await humanFaces(image);
        expect(found, `${name} frame ${k}: faces`).toHaveLength(reference.length);
        for (const face of reference) {
          const mine = found.find((f) => iou(f.box, face.box) > 0.3);
          const at = `${name} frame ${k}, the face at x ${Math.round(face.box[0] + face.box[2] / 2)}`;
          expect(mine, at).toBeDefined();
          if (Math.abs(roll(face.mesh, mirror)) > UPRIGHT_ROLL) {
            // Meshed upright, a rolled head reads its whole roll, where unturned the model sees about half.
            expect(Math.abs(roll(mine!.mesh, mirror)), `${at}: roll`).toBeGreaterThan(Math.abs(roll(face.mesh, mirror)));
            rolled++;
          }
          const landmarks = await faceApiLandmarks(image, Float32Array.from(face.mesh.flatMap(([x, y]) => [x, y])));
          // A profile, or a face too small to have features: face-api puts both eyes on the near one.
          if (eyeDistance(landmarks) < 0.2 * face.box[2]) continue;
          const [ours, humans] = [apart(landmarks, mine!.mesh), apart(landmarks, face.mesh)];
          report.push(`${at}: ${ours.toFixed(2)}, Human's ${humans.toFixed(2)}`);
          expect(ours, `${at}: ${ours.toFixed(2)}, Human's ${humans.toFixed(2)}`).toBeLessThanOrEqual(humans + 0.03);
          const middle = (face.box[0] + face.box[2] / 2) / image.width;
          if (name === "sofa" && middle > 0.4 && middle < 0.6) downcast.push([ours, humans]);
        }
      }
    }
    // Human's crop, sized by a box that takes in the hair over her brow, put her chin on her neck.
    expect(downcast.length, report.join("\n")).toBe(sofa.length);
    expect(Math.max(...downcast.map(([, humans]) => humans)), report.join("\n")).toBeGreaterThan(0.3);
    expect(Math.max(...downcast.map(([ours]) => ours)), report.join("\n")).toBeLessThan(0.17);
    expect(rolled).toBeGreaterThan(10);
  });

  it("finds a face that comes into view at the next detection, and meshes the faces it follows once on a detection that finds no new one", { timeout: 60_000 }, async () => {
    // A still camera: a pan moves the picture between a worker's frames almost as much as a new scene.
    const clip = await makeClip(path.join(dir, "still.mp4"), { seconds: 1.2, fps: 25, width: 576, still: true });
    const still = (await decodeFrames(clip, { maxLongSide: 576, maxFrames: 30 })).frames.filter((_, k) => k % 2 === 0);
    const reference = await humanFaces(still[0]!);
    expect(reference).toHaveLength(3);
    // The first frames with one face painted over in its mean colour: it comes into view on the fifth,
    // between detections.
    const [x, y, w, h] = reference[0]!.box.map(Math.round) as [number, number, number, number];
    const hidden = (image: RgbImage): RgbImage => {
      const pixels = Uint8Array.from(image.pixels);
      const mean = [0, 0, 0];
      for (let row = y; row < y + h; row++) for (let col = x; col < x + w; col++) for (let c = 0; c < 3; c++) mean[c]! += pixels[(row * image.width + col) * 3 + c]! / (w * h);
      for (let row = y; row < y + h; row++) for (let col = x; col < x + w; col++) for (let c = 0; c < 3; c++) pixels[(row * image.width + col) * 3 + c] = mean[c]!;
      return { ...image, pixels };
    };
    const model = human.models.models.facemesh!;
    const execute = model.execute.bind(model);
    let meshCalls = 0;
    model.execute = ((...args: Parameters<typeof execute>) => {
      meshCalls++;
      return execute(...args);
    }) as typeof model.execute;
    try {
      const follower = new FaceFollower(human, mirror, 0.3);
      const counts: number[] = [];
      const calls: number[] = [];
      for (const [k, image] of still.entries()) {
        const before = meshCalls;
        counts.push((await followed(follower, k < 4 ? hidden(image) : image)).length);
        calls.push(meshCalls - before);
      }
      // A detection on every seventh frame (Human's skipFrames, 6): the first, the eighth, the fifteenth.
      expect(counts.slice(0, 7), counts.join(" ")).toEqual([2, 2, 2, 2, 2, 2, 2]);
      expect(counts.slice(7), counts.join(" ")).toEqual(Array(still.length - 7).fill(3));
      // The fifteenth finds no face it does not follow: the three are meshed in one call, as between
      // detections, not by Human one by one, then upright and then from their own crops.
      expect(calls[14], calls.join(" ")).toBe(1);
      expect(calls[7]!, calls.join(" ")).toBeGreaterThan(3);
    } finally {
      model.execute = execute;
    }
  });

  it("finds the faces of a new scene at once, rather than following the last scene's", { timeout: 60_000 }, async () => {
    const follower = new FaceFollower(human, mirror, 0.3);
    // Two frames of the first scene: the second follows the faces of the first, as frames between detections do.
    for (const image of frames.slice(0, 2)) await followed(follower, image);
    const cut = otherScene[0]!;
    const found = await followed(follower, cut);
    const fresh = await followed(new FaceFollower(human, mirror, 0.3), cut);
    expect(fresh).toHaveLength(4);
    expect(found.map((face) => face.box)).toEqual(fresh.map((face) => face.box));
  });
});
