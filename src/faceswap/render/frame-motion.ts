/**
 * Blocks across a frame's width in its motion signature: a face at 576 px spans five or more of
 * them, and a step of a few pixels changes the blocks it crosses in proportion, where single samples
 * would alias.
 */
const BLOCKS_ACROSS = 48;
/**
 * Rows and columns read across a block: about as many as a 576 px frame's blocks have when every
 * other one is read, which gives their means at a quarter of the cost (0.2 ms a frame at 576 px),
 * and a larger frame no dearer a block.
 */
const SAMPLES_ACROSS = 6;
/**
 * Mean change per block (0-255 luma) under which a stretch of frames counts as still and is timed
 * evenly. Sensor noise can pass it, but changes every step alike, so those steps come out about even
 * too, and a still face's meshes on either side are nearly the same.
 */
const STILL = 0.25;

/**
 * Mean change per block (0-255 luma) under which a frame is the one it is compared with, repeated:
 * x264 codes a repeated frame as skipped blocks, which decode to the same pixels.
 */
const REPEATED = 0.05;

/** A frame's luma averaged over blocks (rgb24 pixels), what motionShares compares frame to frame. */
export function motionSignature(pixels: Uint8Array, width: number, height: number): Float32Array {
  const size = Math.max(1, Math.floor(width / BLOCKS_ACROSS));
  const across = Math.max(1, Math.floor(width / size)), down = Math.max(1, Math.floor(height / size));
  const stride = Math.max(1, Math.floor(size / SAMPLES_ACROSS));
  const signature = new Float32Array(across * down);
  for (let by = 0; by < down; by++) {
    for (let bx = 0; bx < across; bx++) {
      let sum = 0, n = 0;
      for (let y = by * size; y < (by + 1) * size; y += stride) {
        for (let x = bx * size, p = (y * width + x) * 3; x < (bx + 1) * size; x += stride, p += 3 * stride) {
          sum += 0.299 * pixels[p]! + 0.587 * pixels[p + 1]! + 0.114 * pixels[p + 2]!;
          n++;
        }
      }
      signature[by * across + bx] = sum / n;
    }
  }
  return signature;
}

/**
 * How far along the picture's motion each frame of a stretch is, 0 for its first frame and 1 for its
 * last, from the change between consecutive signatures (`signatures`, the stretch's frames in order).
 * Footage does not always move evenly: a frame repeated (a phone's variable frame rate made constant,
 * a film's pulldown) has not moved at all, and a face drawn a share of the way by time alone slid on
 * while the head held still. A stretch that is still throughout is timed evenly.
 */
export function motionShares(signatures: readonly Float32Array[]): number[] {
  const steps = signatures.slice(1).map((signature, k) => change(signatures[k]!, signature));
  const total = steps.reduce((sum, step) => sum + step, 0);
  const last = signatures.length - 1;
  if (total / Math.max(1, steps.length) < STILL) return signatures.map((_, k) => k / Math.max(1, last));
  let done = 0;
  return [0, ...steps.map((step) => (done += step) / total)];
}

/** Whether the frames of two signatures show the same picture (see REPEATED). */
export function samePicture(a: Float32Array, b: Float32Array): boolean {
  return change(a, b) < REPEATED;
}

/** Mean absolute difference of two signatures of the same size. */
function change(a: Float32Array, b: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / Math.max(1, a.length);
}
