import module, { createRequire } from "node:module";
import path from "node:path";
import type { RgbImage } from "../../src/faceswap/render/images.js";

const require = createRequire(import.meta.url);

/** The part of @vladmandic/face-api's API the judge uses (its recognition net on a face crop). */
interface FaceApi {
  tf: {
    Tensor: { prototype: Record<string, unknown> };
    tensor3d(values: Uint8Array, shape: [number, number, number], dtype: "int32"): unknown;
    image: { resizeBilinear(image: unknown, size: [number, number]): unknown };
    setBackend(name: string): Promise<boolean>;
    ready(): Promise<void>;
    tidy<T>(fn: () => T): T;
    dispose(value: unknown): void;
    reshape(value: unknown, shape: number[]): unknown;
    cast(value: unknown, dtype: string): unknown;
  } & Record<string, unknown>;
  nets: {
    faceRecognitionNet: {
      loadFromDisk(dir: string): Promise<void>;
      computeFaceDescriptor(input: unknown): Promise<Float32Array>;
    };
    faceLandmark68Net: {
      loadFromDisk(dir: string): Promise<void>;
      detectLandmarks(input: unknown): Promise<{ positions: { x: number; y: number }[] }>;
    };
  };
}

let loaded: Promise<FaceApi> | undefined;

/**
 * face-api's node-wasm build asks for the @tensorflow/tfjs umbrella package, which is not installed;
 * the core (with the WASM backend the build registers) is all its recognition net uses, once the
 * tensor's chained methods (`x.as3D()`, ...) that the umbrella adds are put on the prototype.
 */
function loadFaceApi(): Promise<FaceApi> {
  loaded ??= (async () => {
    module.registerHooks({
      resolve: (specifier, context, next) => next(specifier === "@tensorflow/tfjs" ? "@tensorflow/tfjs-core" : specifier, context),
    });
    const faceApi = require("@vladmandic/face-api/dist/face-api.node-wasm.js") as FaceApi;
    const { tf } = faceApi;
    const proto = tf.Tensor.prototype;
    for (const [name, op] of Object.entries(tf)) {
      if (typeof op !== "function" || name in proto || !/^[a-z]/.test(name)) continue;
      proto[name] = function (this: unknown, ...args: unknown[]) {
        return (op as (...a: unknown[]) => unknown)(this, ...args);
      };
    }
    for (const rank of [1, 2, 3, 4, 5]) {
      proto[`as${rank}D`] = function (this: { size: number }, ...shape: number[]) {
        return tf.reshape(this, rank === 1 && shape.length === 0 ? [this.size] : shape);
      };
    }
    proto.asScalar = function (this: unknown) {
      return tf.reshape(this, []);
    };
    proto.asType = function (this: unknown, dtype: string) {
      return tf.cast(this, dtype);
    };
    await tf.setBackend("wasm");
    await tf.ready();
    const models = path.join(path.dirname(require.resolve("@vladmandic/face-api/package.json")), "model");
    await faceApi.nets.faceRecognitionNet.loadFromDisk(models);
    await faceApi.nets.faceLandmark68Net.loadFromDisk(models);
    return faceApi;
  })();
  return loaded;
}

// The mesh points at face-api's own 68 landmarks' outline: the jaw from ear to ear and the brows.
// face-api describes the box of those (its "aligned rect"), cheek to cheek and brow to chin.
const JAW = [454, 323, 361, 288, 397, 365, 379, 378, 400, 377, 152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234];
const BROWS = [70, 63, 105, 66, 107, 55, 65, 52, 53, 46, 300, 293, 334, 296, 336, 285, 295, 282, 283, 276];

/** A square crop of an image, turned by `angle` about its centre (cx, cy) in the image. */
interface Crop {
  pixels: Uint8Array;
  size: number;
  cx: number;
  cy: number;
  cos: number;
  sin: number;
}

/**
 * The square around the mesh's jaw and brows (see JAW), turned so that the eyes' outer corners
 * (points 33 and 263) lie level.
 */
function alignedCrop(image: RgbImage, mesh: Float32Array): Crop {
  const angle = Math.atan2(mesh[2 * 263 + 1]! - mesh[2 * 33 + 1]!, mesh[2 * 263]! - mesh[2 * 33]!);
  const cos = Math.cos(angle), sin = Math.sin(angle);
  const outline = [...JAW, ...BROWS];
  const mx = outline.reduce((sum, i) => sum + mesh[2 * i]!, 0) / outline.length;
  const my = outline.reduce((sum, i) => sum + mesh[2 * i + 1]!, 0) / outline.length;
  let minU = Infinity, maxU = -Infinity, minV = Infinity, maxV = -Infinity;
  for (const i of outline) {
    const x = mesh[2 * i]! - mx, y = mesh[2 * i + 1]! - my;
    const u = cos * x + sin * y, v = -sin * x + cos * y;
    minU = Math.min(minU, u);
    maxU = Math.max(maxU, u);
    minV = Math.min(minV, v);
    maxV = Math.max(maxV, v);
  }
  const size = Math.max(8, Math.round(Math.max(maxU - minU, maxV - minV)));
  const uc = (minU + maxU) / 2, vc = (minV + maxV) / 2;
  const cx = mx + cos * uc - sin * vc, cy = my + sin * uc + cos * vc;
  const pixels = new Uint8Array(size * size * 3);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      const dx = x + 0.5 - size / 2, dy = y + 0.5 - size / 2;
      const sx = Math.min(image.width - 1, Math.max(0, Math.floor(cx + cos * dx - sin * dy)));
      const sy = Math.min(image.height - 1, Math.max(0, Math.floor(cy + sin * dx + cos * dy)));
      pixels.set(image.pixels.subarray((sy * image.width + sx) * 3, (sy * image.width + sx) * 3 + 3), (y * size + x) * 3);
    }
  }
  return { pixels, size, cx, cy, cos, sin };
}

/**
 * face-api's 128-d descriptor of the face whose Human mesh is `mesh` in `image`, from alignedCrop.
 * The net is made for upright faces (on the pan's right face, tilted by about 30 degrees, it barely
 * told the new face from the old), and for face-api's own crop: a square around Human's detector box,
 * which takes in the forehead, hair and background, made everyone in the test footage score within
 * face-api's same-person distance of the new face (0.38-0.45) and hid the swapped features.
 */
export async function faceApiDescriptor(image: RgbImage, mesh: Float32Array): Promise<Float32Array> {
  const faceApi = await loadFaceApi();
  const crop = alignedCrop(image, mesh);
  const { tf } = faceApi;
  const input = tf.tidy(() => tf.image.resizeBilinear(tf.tensor3d(crop.pixels, [crop.size, crop.size, 3], "int32"), [150, 150]));
  try {
    return await faceApi.nets.faceRecognitionNet.computeFaceDescriptor(input);
  } finally {
    tf.dispose(input);
  }
}

/**
 * face-api's 68 landmarks (dlib's order: jaw 0-16, brows 17-26, nose 27-35, eyes 36-47, mouth
 * 48-67) of the face whose Human mesh is `mesh` in `image`, as x, y pairs in the image. A model of
 * its own, trained apart from Human's mesh: it only takes its crop from the mesh.
 */
export async function faceApiLandmarks(image: RgbImage, mesh: Float32Array): Promise<Float32Array> {
  const faceApi = await loadFaceApi();
  const crop = alignedCrop(image, mesh);
  const input = faceApi.tf.tensor3d(crop.pixels, [crop.size, crop.size, 3], "int32");
  try {
    const { positions } = await faceApi.nets.faceLandmark68Net.detectLandmarks(input);
    const points = new Float32Array(positions.length * 2);
    for (const [k, { x, y }] of positions.entries()) {
      const dx = x - crop.size / 2, dy = y - crop.size / 2;
      points[2 * k] = crop.cx + crop.cos * dx - crop.sin * dy;
      points[2 * k + 1] = crop.cy + crop.sin * dx + crop.cos * dy;
    }
    return points;
  } finally {
    faceApi.tf.dispose(input);
  }
}

/** Euclidean distance of two face-api descriptors (face-api counts below 0.6 as the same person). */
export function descriptorDistance(a: Float32Array, b: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += (a[i]! - b[i]!) ** 2;
  return Math.sqrt(sum);
}
