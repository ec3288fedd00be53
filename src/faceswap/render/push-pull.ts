import { scratch } from "./scratch.js";

/**
 * Fills the pixels of weight 0 in `values` (3 channels and a weight per pixel) from the weighted ones
 * around them: halvings average the known values (pull), then each level's unknown part takes the
 * bilinear upsampling of the next (push).
 */
export function pushPull(values: Float32Array, w: number, h: number): void {
  // Only pixels of weight below 1 change: most patches (no hand in front of the face) have none.
  let full = true;
  for (let i = 3; i < w * h * 4 && full; i += 4) full = values[i]! >= 1;
  if (full) return;
  const levels: Array<{ data: Float32Array; w: number; h: number }> = [{ data: values, w, h }];
  while (levels.at(-1)!.w > 1 || levels.at(-1)!.h > 1) {
    const fine = levels.at(-1)!;
    const cw = Math.ceil(fine.w / 2), ch = Math.ceil(fine.h / 2);
    const data = scratch(`pull${levels.length}`, cw * ch * 4).fill(0);
    for (let y = 0; y < fine.h; y++) {
      for (let x = 0; x < fine.w; x++) {
        const f = (y * fine.w + x) * 4, c = ((y >> 1) * cw + (x >> 1)) * 4;
        const weight = fine.data[f + 3]!;
        if (weight === 0) continue;
        for (let k = 0; k < 3; k++) data[c + k]! += fine.data[f + k]! * weight;
        data[c + 3]! += weight;
      }
    }
    for (let i = 0; i < cw * ch; i++) {
      const weight = data[i * 4 + 3]!;
      if (weight === 0) continue;
      for (let k = 0; k < 3; k++) data[i * 4 + k]! /= weight;
      data[i * 4 + 3] = Math.min(1, weight);
    }
    levels.push({ data, w: cw, h: ch });
  }
  for (let l = levels.length - 2; l >= 0; l--) {
    const fine = levels[l]!, coarse = levels[l + 1]!;
    for (let y = 0; y < fine.h; y++) {
      const cy = Math.min(coarse.h - 1, Math.max(0, (y + 0.5) / 2 - 0.5));
      const iy = Math.min(coarse.h - 2, Math.floor(cy)), fy = coarse.h > 1 ? cy - Math.max(0, iy) : 0;
      for (let x = 0; x < fine.w; x++) {
        const f = (y * fine.w + x) * 4;
        const weight = fine.data[f + 3]!;
        if (weight >= 1) continue;
        const cx = Math.min(coarse.w - 1, Math.max(0, (x + 0.5) / 2 - 0.5));
        const ix = Math.min(coarse.w - 2, Math.floor(cx)), fx = coarse.w > 1 ? cx - Math.max(0, ix) : 0;
        const x0 = Math.max(0, ix), y0 = Math.max(0, iy);
        const x1 = Math.min(coarse.w - 1, x0 + 1), y1 = Math.min(coarse.h - 1, y0 + 1);
        for (let k = 0; k < 4; k++) {
          const top = coarse.data[(y0 * coarse.w + x0) * 4 + k]! * (1 - fx) + coarse.data[(y0 * coarse.w + x1) * 4 + k]! * fx;
          const bottom = coarse.data[(y1 * coarse.w + x0) * 4 + k]! * (1 - fx) + coarse.data[(y1 * coarse.w + x1) * 4 + k]! * fx;
          const up = top * (1 - fy) + bottom * fy;
          fine.data[f + k] = k === 3 ? weight + (1 - weight) * up : fine.data[f + k]! * weight + (1 - weight) * up;
        }
      }
    }
  }
}
