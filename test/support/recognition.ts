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
      proto[`as${rank}D`] = function (this: unknown, ...shape: number[]) {
        return tf.reshape(this, shape);
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
    return faceApi;
  })();
  return loaded;
}

/**
 * face-api's 128-d descriptor of the square crop of `image` around `box` [x, y, w, h] (grown by 10 %),
 * turned so that the eyes' outer corners of `mesh` (Human's points 33 and 263) lie level: the net is
 * made for upright faces, and on the pan's right face (tilted by about 30 degrees) it barely told the
 * new face from the old.
 */
export async function faceApiDescriptor(image: RgbImage, box: readonly number[], mesh: Float32Array): Promise<Float32Array> {
  const faceApi = await loadFaceApi();
  const [bx, by, bw, bh] = box as [number, number, number, number];
  const s = Math.max(8, Math.round(Math.max(bw, bh) * 1.1));
  const cx = bx + bw / 2, cy = by + bh / 2;
  const angle = Math.atan2(mesh[2 * 263 + 1]! - mesh[2 * 33 + 1]!, mesh[2 * 263]! - mesh[2 * 33]!);
  const cos = Math.cos(angle), sin = Math.sin(angle);
  const pixels = new Uint8Array(s * s * 3);
  for (let y = 0; y < s; y++) {
    for (let x = 0; x < s; x++) {
      const dx = x + 0.5 - s / 2, dy = y + 0.5 - s / 2;
      const sx = Math.min(image.width - 1, Math.max(0, Math.floor(cx + cos * dx - sin * dy)));
      const sy = Math.min(image.height - 1, Math.max(0, Math.floor(cy + sin * dx + cos * dy)));
      pixels.set(image.pixels.subarray((sy * image.width + sx) * 3, (sy * image.width + sx) * 3 + 3), (y * s + x) * 3);
    }
  }
  const { tf } = faceApi;
  const input = tf.tidy(() => tf.image.resizeBilinear(tf.tensor3d(pixels, [s, s, 3], "int32"), [150, 150]));
  try {
    return await faceApi.nets.faceRecognitionNet.computeFaceDescriptor(input);
  } finally {
    tf.dispose(input);
  }
}

/** Euclidean distance of two face-api descriptors (face-api counts below 0.6 as the same person). */
export function descriptorDistance(a: Float32Array, b: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += (a[i]! - b[i]!) ** 2;
  return Math.sqrt(sum);
}
