import type { RgbImage } from "./images.js";

const f32 = Math.fround;

/**
 * tfjs-wasm's image kernels that cut the mesh model's crops, in JavaScript and equal to them to the
 * bit: every step rounds to float32 as the kernels do. The kernels took 2-3.5 ms a 192 px crop on
 * these cores (a sixth to two fifths of that the cast of an int32 frame, the rest their own
 * arithmetic: index sums in float, a conversion per tap); these take 0.7-1.2 ms. Equal to the bit
 * matters: the mesh model answers a crop cut here exactly as it answers Human's own, so a face
 * meshed here and on a frame Human detects does not jump, and a turned face is meshed as before.
 */

/**
 * One box of rgb24 bytes resized to size x size as `tf.image.cropAndResize` (bilinear) makes it:
 * values 0-255, 0 outside the image. `box` is [top, left, bottom, right], each a fraction of the
 * image's height or width.
 */
export function cropAndResize(image: RgbImage, box: readonly [number, number, number, number], size: number): Float32Array {
  const { pixels, width, height } = image;
  const [y1, x1, y2, x2] = box.map(f32) as [number, number, number, number];
  const out = new Float32Array(size * size * 3);
  const h1 = height - 1, w1 = width - 1;
  const heightScale = f32(f32(f32(y2 - y1) * h1) / (size - 1));
  const widthScale = f32(f32(f32(x2 - x1) * w1) / (size - 1));
  const rowStride = width * 3;
  const rowAt = (y: number) => f32(f32(y1 * h1) + f32(y * heightScale));

  if (copiesRows(x1, x2, y1, w1, height, heightScale, widthScale, size)) {
    // The kernel's shortcut for a box the size of the crop on whole pixels: it copies each row from
    // the image's left edge, wherever the box starts.
    for (let y = 0; y < size; y++) {
      const yInd = rowAt(y);
      if (yInd < 0 || yInd > h1) continue;
      const from = Math.trunc(yInd) * rowStride;
      for (let k = 0; k < size * 3; k++) out[y * size * 3 + k] = pixels[from + k] ?? 0;
    }
    return out;
  }

  // The columns are the same on every row: for each value of a crop row, the bytes it reads in an
  // image row and how far between them. Those inside the image are one run, [from, to).
  const leftAt = new Int32Array(size * 3), rightAt = new Int32Array(size * 3), lerpAt = new Float32Array(size * 3);
  let from = size * 3, to = 0;
  for (let x = 0; x < size; x++) {
    const xInd = f32(f32(x1 * w1) + f32(x * widthScale));
    if (xInd < 0 || xInd > w1) continue;
    const l = Math.floor(xInd), r = Math.min(w1, Math.ceil(xInd));
    for (let c = 0; c < 3; c++) {
      leftAt[3 * x + c] = 3 * l + c;
      rightAt[3 * x + c] = 3 * r + c;
      lerpAt[3 * x + c] = xInd - l;
    }
    from = Math.min(from, 3 * x);
    to = 3 * x + 3;
  }
  // Each image row the crop reads, interpolated along the row once: an enlarged face's crop reads
  // the same two image rows for several of its rows. Stored in a Float32Array, each value is rounded
  // as the kernel rounds it.
  const lines = [new Float32Array(size * 3), new Float32Array(size * 3)];
  const lineRows = [-1, -1];
  const line = (row: number): Float32Array => {
    const k = lineRows[0] === row ? 0 : lineRows[1] === row ? 1 : lineRows[0]! < lineRows[1]! ? 0 : 1;
    const into = lines[k]!;
    if (lineRows[k] !== row) {
      lineRows[k] = row;
      const base = row * rowStride;
      for (let i = from; i < to; i++) {
        const a = pixels[base + leftAt[i]!]!;
        into[i] = a + f32((pixels[base + rightAt[i]!]! - a) * lerpAt[i]!);
      }
    }
    return into;
  };
  for (let y = 0; y < size; y++) {
    const yInd = rowAt(y);
    if (yInd < 0 || yInd > h1) continue;
    const top = Math.floor(yInd);
    const yLerp = yInd - top;
    const upper = line(top), lower = line(Math.min(h1, Math.ceil(yInd)));
    const o = y * size * 3;
    for (let i = from; i < to; i++) {
      const u = upper[i]!;
      out[o + i] = u + f32(f32(lower[i]! - u) * yLerp);
    }
  }
  return out;
}

/** The kernel's test for its row-copying shortcut, with its own arithmetic (the height, not height - 1, in one term). */
function copiesRows(x1: number, x2: number, y1: number, w1: number, height: number, heightScale: number, widthScale: number, size: number): boolean {
  if (!(x2 > x1 && x1 >= 0) || size !== f32(1 + f32(f32(x2 - x1) * w1))) return false;
  const yFactor = f32(f32(y1 * height) + heightScale);
  if (yFactor - Math.floor(yFactor) !== 0) return false;
  const xFactor = f32(f32(x1 * w1) + widthScale);
  return xFactor - Math.floor(xFactor) === 0;
}

/**
 * `region` of the image (a rectangle inside it), turned by `radians` about `centre` (pixels of the
 * region) as `tf.image.rotateWithOffset` turns it: each pixel takes the nearest one it came from, 0
 * where that lies outside. Only `rows` of the result (an image the region's size) are filled: those
 * a crop of it reads (see rowsRead).
 */
export function rotateWithOffset(
  image: RgbImage,
  region: { x0: number; y0: number; width: number; height: number },
  radians: number,
  centre: readonly [number, number],
  rows: readonly [number, number] = [0, region.height],
): RgbImage {
  const { x0, y0, width, height } = region;
  const out = new Uint8Array(width * height * 3);
  const sin = f32(Math.sin(f32(radians))), cos = f32(Math.cos(f32(radians)));
  const cx = f32(centre[0]), cy = f32(centre[1]);
  const stride = image.width * 3;
  for (let row = Math.max(0, rows[0]); row < Math.min(height, rows[1]); row++) {
    const dy = f32(row - cy), dySin = f32(dy * sin), dyCos = f32(dy * cos);
    for (let col = 0; col < width; col++) {
      const dx = f32(col - cx);
      const x = roundHalfAway(f32(f32(f32(dx * cos) - dySin) + cx));
      const y = roundHalfAway(f32(f32(f32(dx * sin) + dyCos) + cy));
      if (x < 0 || x >= width || y < 0 || y >= height) continue;
      const from = (y0 + y) * stride + (x0 + x) * 3, to = (row * width + col) * 3;
      out[to] = image.pixels[from]!;
      out[to + 1] = image.pixels[from + 1]!;
      out[to + 2] = image.pixels[from + 2]!;
    }
  }
  return { pixels: out, width, height };
}

/** C's round: halves away from zero (Math.round takes them up). */
function roundHalfAway(v: number): number {
  return v >= 0 ? Math.floor(v + 0.5) : -Math.floor(0.5 - v);
}

/** The rows [from, to) of an image `height` rows high that cropAndResize reads for `box`, with a row to spare each side. */
export function rowsRead(box: readonly [number, number, number, number], height: number): [number, number] {
  return [Math.floor(box[0] * (height - 1)) - 1, Math.ceil(box[2] * (height - 1)) + 2];
}
