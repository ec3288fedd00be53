import type { Human } from "@vladmandic/human";
import { beforeAll, describe, expect, it } from "vitest";
import { cropAndResize, rotateWithOffset, rowsRead } from "../src/faceswap/render/resample.js";
import { loadHuman } from "../src/faceswap/render/human.js";
import type { RgbImage } from "../src/faceswap/render/images.js";
import { sequence } from "./support/sequence.js";

type Tf = typeof import("@tensorflow/tfjs-core");
type Box = [number, number, number, number];

let human: Human;
let tf: Tf;

beforeAll(async () => {
  human = await loadHuman();
  tf = human.tf as Tf;
}, 60_000);

function noise(width: number, height: number, next: () => number): RgbImage {
  return { width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(next() * 256)) };
}

/** tfjs-wasm's own crop of the image's int32 tensor, as Human cuts its face crops. */
function kernelCrop(image: RgbImage, box: Box, size: number): Float32Array {
  return tf.tidy(() => {
    const tensor = tf.tensor4d(image.pixels, [1, image.height, image.width, 3], "int32");
    return tf.image.cropAndResize(tensor, [box], [0], [size, size], "bilinear").dataSync() as Float32Array;
  });
}

/** Positions where the two crops differ in any bit, with both values. */
function differences(ours: Float32Array, theirs: Float32Array): string[] {
  const a = new Uint32Array(ours.buffer), b = new Uint32Array(theirs.buffer);
  const found: string[] = [];
  for (let i = 0; i < a.length && found.length < 5; i++) if (a[i] !== b[i]) found.push(`[${i}] ${ours[i]} vs ${theirs[i]}`);
  return found;
}

describe("crop and resize", () => {
  it("equals tfjs-wasm's bilinear crop to the bit, for boxes inside, across and past the image's edges", () => {
    const next = sequence(7);
    const images = [noise(576, 384, next), noise(97, 61, next)];
    let boxes = 0;
    for (const image of images) {
      for (let k = 0; k < 40; k++) {
        // Faces' boxes: anywhere from a tenth to most of the frame, some reaching past an edge.
        const side = 0.1 + 0.8 * next();
        const top = -0.2 + 1.1 * next(), left = -0.2 + 1.1 * next();
        const box: Box = [top, left, top + side * (0.7 + 0.6 * next()), left + side];
        const size = [192, 224, 7][k % 3]!;
        const ours = cropAndResize(image, box, size);
        expect(ours).toHaveLength(size * size * 3);
        expect(differences(ours, kernelCrop(image, box, size)), `box ${box.join(", ")}, size ${size}`).toEqual([]);
        boxes++;
      }
    }
    expect(boxes).toBe(80);
  });

  it("copies rows as the kernel does for a box of the crop's size on whole pixels", () => {
    const image = noise(64, 48, sequence(11));
    // 16 pixels wide from column 0 and row 0: the kernel's shortcut, which copies from the row's start.
    const box: Box = [0, 0, 15 / 47, 15 / 63];
    expect(differences(cropAndResize(image, box, 16), kernelCrop(image, box, 16))).toEqual([]);
    const shifted: Box = [0, 8 / 63, 15 / 47, 23 / 63];
    expect(differences(cropAndResize(image, shifted, 16), kernelCrop(image, shifted, 16))).toEqual([]);
  });

  it("turns a region of the image as tfjs-wasm's rotateWithOffset does, to the bit, under the crop that reads it", () => {
    const next = sequence(13);
    const image = noise(576, 384, next);
    let turns = 0;
    for (let k = 0; k < 60; k++) {
      const w = 40 + Math.floor(200 * next()), h = 40 + Math.floor(200 * next());
      const x0 = Math.floor((576 - w) * next()), y0 = Math.floor((384 - h) * next());
      const radians = (next() - 0.5) * 2.4;
      const centre = [w * (0.3 + 0.4 * next()), h * (0.3 + 0.4 * next())] as const;
      const box: Box = [0.1 + 0.2 * next(), 0.1 + 0.2 * next(), 0.7 + 0.2 * next(), 0.7 + 0.2 * next()];
      const theirs = tf.tidy(() => {
        const part = tf.slice(tf.tensor4d(image.pixels, [1, 384, 576, 3], "float32"), [0, y0, x0, 0], [1, h, w, 3]);
        const turned = tf.image.rotateWithOffset(part as never, radians, 0, [centre[0] / w, centre[1] / h]);
        return tf.image.cropAndResize(turned, [box], [0], [64, 64], "bilinear").dataSync() as Float32Array;
      });
      const turned = rotateWithOffset(image, { x0, y0, width: w, height: h }, radians, centre, rowsRead(box, h));
      expect(differences(cropAndResize(turned, box, 64), theirs), `region ${x0},${y0} ${w}x${h}, ${radians} rad`).toEqual([]);
      turns++;
    }
    expect(turns).toBe(60);
    // Half a turn about a centre a quarter past a pixel lands the centre's row on halves: C's round
    // takes -0.5 to -1 (outside), Math.round to 0.
    const half = tf.tidy(() => {
      const part = tf.slice(tf.tensor4d(image.pixels, [1, 384, 576, 3], "float32"), [0, 0, 0, 0], [1, 41, 41, 3]);
      return tf.image.rotateWithOffset(part as never, Math.PI, 0, [10.25 / 41, 20 / 41]).dataSync() as Float32Array;
    });
    const ours = rotateWithOffset(image, { x0: 0, y0: 0, width: 41, height: 41 }, Math.PI, [10.25, 20]);
    expect(differences(Float32Array.from(ours.pixels), half)).toEqual([]);
  });

  it("leaves the part of a box past the image at 0, as the kernel's extrapolation value", () => {
    const image: RgbImage = { width: 10, height: 10, pixels: new Uint8Array(300).fill(200) };
    const crop = cropAndResize(image, [-1, -1, 0.5, 0.5], 5);
    expect(crop[0]).toBe(0);
    expect(crop.at(-1)).toBe(200);
  });
});
