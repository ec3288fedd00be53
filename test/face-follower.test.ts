import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Config, Human } from "@vladmandic/human";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FaceFollower, type FollowedFace } from "../src/faceswap/render/face-follower.js";
import { loadHuman } from "../src/faceswap/render/human.js";
import { decodeFrames, type RgbImage } from "../src/faceswap/render/images.js";
import { mirrorPoints } from "../src/faceswap/render/mirror.js";
import { roll, UPRIGHT_ROLL } from "../src/faceswap/render/upright.js";
import { makeClip, samplePhoto } from "./support/footage.js";

let dir: string;
let human: Human;
let mirror: Int32Array;
/** One worker's share of sample1's pan (every other frame): three faces, two of them rolled. */
let frames: RgbImage[];
/** sample4's pan: four other faces, elsewhere in the frame. */
let otherScene: RgbImage[];

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "face-follower-test-"));
  const [clip, other] = await Promise.all([
    makeClip(path.join(dir, "people.mp4"), { seconds: 1.2, fps: 25, width: 576 }),
    makeClip(path.join(dir, "other-people.mp4"), { seconds: 0.4, fps: 25, width: 576, photo: samplePhoto(4) }),
  ]);
  [human, { frames }, { frames: otherScene }] = await Promise.all([
    loadHuman(),
    decodeFrames(clip, { maxLongSide: 576, maxFrames: 30 }),
    decodeFrames(other, { maxLongSide: 576, maxFrames: 10 }),
  ]);
  mirror = mirrorPoints(human.faceUVMap);
  frames = frames.filter((_, k) => k % 2 === 0);
});

afterAll(async () => {
  await fs.rm(dir, { recursive: true, force: true });
});

/** The faces Human finds following its own boxes between detections, as the renderer once used it. */
async function humanFollowing(image: RgbImage, first: boolean) {
  const tensor = human.tf.tensor3d(image.pixels, [image.height, image.width, 3], "int32");
  try {
    const config = {
      cacheSensitivity: first ? -1 : 0.7,
      face: { enabled: true, detector: { minConfidence: 0.3, rotation: false }, description: { enabled: false } },
      hand: { enabled: false },
    } as Partial<Config>;
    return (await human.detect(tensor, config)).face.filter((face) => face.mesh.length > 0);
  } finally {
    human.tf.dispose(tensor);
  }
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
  it("meshes a face that is not rolled exactly as Human does between its own detections, and a rolled one upright", { timeout: 60_000 }, async () => {
    const follower = new FaceFollower(human, mirror, 0.3);
    let level = 0, rolled = 0;
    for (const [k, image] of frames.entries()) {
      // The reference first: Human keeps its boxes between calls, which the follower's own detections reset.
      const reference = await humanFollowing(image, k === 0);
      const found = await followed(follower, image);
      expect(found, `frame ${2 * k}: faces`).toHaveLength(reference.length);
      for (const [i, face] of reference.entries()) {
        if (Math.abs(roll(face.mesh, mirror)) < UPRIGHT_ROLL) {
          expect(found[i]!.box, `frame ${2 * k}, face ${i}: box`).toEqual(face.box);
          expect(found[i]!.mesh, `frame ${2 * k}, face ${i}: mesh`).toEqual(face.mesh);
          level++;
        } else {
          // Meshed upright, a rolled head reads its whole roll, where unturned the model sees about half
          // (its box is centred on the upright mesh, so it differs from Human's by a pixel or two).
          expect(Math.abs(roll(found[i]!.mesh, mirror)), `frame ${2 * k}, face ${i}: roll`).toBeGreaterThan(Math.abs(roll(face.mesh, mirror)));
          rolled++;
        }
      }
    }
    expect(level).toBeGreaterThan(10);
    expect(rolled).toBeGreaterThan(10);
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
