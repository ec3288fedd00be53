import { BROWS, EYE_OPENINGS, facingSign, OUTER_LIPS, OVAL, rasterise, signedArea } from "./mesh.js";
import { coreSkin, keepClusteredOccluders, medianModel, regions } from "./occlusion.js";
import { boxBlur, fillPolygon, pointBounds, sampleCubic, toYCbCr, ycbcr } from "./pixels.js";
import { pushPull } from "./push-pull.js";
import type { SourceFace } from "./swap.js";

// A cleared region grows by this share of the face past the pixels found: the edge of a lock of hair,
// a few strands lighter than the rest, passes for skin by its colour and was left as dark lines
// along the region.
const CLEAR_GROW = 0.06;
// The light and colour of a cleared pixel come from the clear skin around it, blurred over this share
// of the face; its finer texture from its mirror image.
const CLEAR_LIGHT = 0.06;
// The rim of the face, as a share of its size, that gives no texture to the other side.
const RIM = 0.03;
// Width of the fade from the cleared pixels to the photo's own, as a share of the face.
const CLEAR_FEATHER = 0.03;

// The source's skin colour is measured on its cheeks and nose (see coreSkin): over the whole face, as for
// a target, the hair over it and a coloured light widened the colour's spread until dark hair passed
// for skin. Spreads of that colour (chroma; luma, darker only) past which a pixel is not skin. Skin lit
// brighter than the cheeks (a forehead in the light) is still skin; hair is darker, or of another colour.
const OFF_CHROMA = 4, OFF_LUMA = 3;
// The cheeks and nose of one photo can be so even in colour that the side of the face in shade, warmer
// than they are, fell outside their spread and was cleared with the hair beside it: the spread of
// their chroma is taken as this much at least (YCbCr units).
const MIN_CHROMA_SPREAD = 4;

/**
 * Per pixel of the w x h photo (x, y pairs), where its mirror image on the face of `mesh` lies (see
 * mirrorPoints): the same barycentric point of the mirror image of the triangle it lies in. NaN off
 * the face, and where the triangle or its mirror image faces away (a turned head shows one side only).
 */
function mirrorPositions(mesh: Float32Array, triangles: ArrayLike<number>, mirror: Int32Array, w: number, h: number): Float32Array {
  const at = new Float32Array(2 * w * h).fill(Number.NaN);
  const depth = new Float32Array(mesh.length / 2);
  const facing = facingSign(mesh, triangles);
  for (let t = 0; t + 2 < triangles.length; t += 3) {
    const a = triangles[t]!, b = triangles[t + 1]!, c = triangles[t + 2]!;
    const ma = mirror[a]!, mb = mirror[b]!, mc = mirror[c]!;
    if (signedArea(mesh, a, b, c) * facing <= 0 || signedArea(mesh, ma, mb, mc) * facing >= 0) continue;
    rasterise(mesh, depth, a, b, c, 0, 0, w, h, (i, _z, wa, wb, wc) => {
      at[2 * i] = wa * mesh[2 * ma]! + wb * mesh[2 * mb]! + wc * mesh[2 * mc]!;
      at[2 * i + 1] = wa * mesh[2 * ma + 1]! + wb * mesh[2 * mb + 1]! + wc * mesh[2 * mc + 1]!;
    });
  }
  return at;
}

/**
 * The source photo's pixels with what lies over its face cleared: hair over the forehead, a temple
 * or a cheek, a hand at the chin. Drawn as it is, it lies on every new face (dark hair over a temple
 * became a brown smear on each target's forehead and temple). It is found much as for a target (see
 * `occlusion`): clusters far from the face's skin colour, measured on its cheeks and nose
 * (CORE_POINTS), that come in from its outline. A region over both sides of the face alike is cleared
 * above the nose tip only (a fringe); below it, it is the person's own beard or moustache, which the
 * new face keeps. A cleared pixel takes the texture of its mirror image on the face (see mirrorPoints)
 * where that is clear skin and faces the camera, and its light and colour from the clear skin around
 * it; one whose mirror image is covered too is filled from the skin around it.
 */
export function withoutOccluders(source: SourceFace, triangles: ArrayLike<number>, mirror: Int32Array): Uint8Array {
  const { pixels, width: w, height: h, mesh } = source;
  const n = w * h;
  const { minX, minY, maxX, maxY } = pointBounds(mesh);
  const faceSize = Math.sqrt((maxX - minX) * (maxY - minY));
  const rgb = Float32Array.from(pixels);
  const covered = new Float32Array(n);
  fillPolygon(covered, w, h, mesh, OVAL, 0, 0, 1);
  // The brows are dark like hair and are taken in with hair that reaches them (its tail over a temple
  // stayed, a dark mark beside the new face's eye), but only where their mirror image is clear (below).
  const features = new Float32Array(n), brows = new Float32Array(n);
  for (const polygon of [OUTER_LIPS, ...EYE_OPENINGS]) fillPolygon(features, w, h, mesh, polygon, 0, 0, 1);
  for (const polygon of BROWS) fillPolygon(brows, w, h, mesh, polygon, 0, 0, 1);
  const core = coreSkin(mesh, (i) => covered[i] === 1 && features[i] === 0, { x0: 0, y0: 0, w, h, faceSize });
  const skin = medianModel(rgb, n, (i) => core[i] === 1);
  if (!skin) return pixels;
  const off = new Float32Array(n), notSkin = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    if (covered[i] === 0 || features[i] === 1) continue;
    toYCbCr(rgb, i * 3);
    const chroma = Math.hypot((ycbcr[1] - skin.mean[1]!) / Math.max(MIN_CHROMA_SPREAD, skin.spread[1]!), (ycbcr[2] - skin.mean[2]!) / Math.max(MIN_CHROMA_SPREAD, skin.spread[2]!));
    if (chroma <= OFF_CHROMA && ycbcr[0] >= skin.mean[0]! - OFF_LUMA * skin.spread[0]!) continue;
    notSkin[i] = off[i] = 1;
  }
  const found = new Float32Array(n);
  keepClusteredOccluders(off, covered, found, { w, h, faceSize });
  if (!found.includes(1)) return pixels;
  const mirrorAt = mirrorPositions(mesh, triangles, mirror, w, h);
  // A region its mirror image shares (one over both sides of the face) is cleared only above the nose
  // tip (1): a fringe across the forehead; below it, it is the face's own, a beard or a moustache. One
  // over a side only is hair or a hand wherever it is.
  const at = (i: number) => {
    const x = mirrorAt[2 * i]!, y = mirrorAt[2 * i + 1]!;
    return Number.isNaN(x) || x < 0 || y < 0 || x >= w || y >= h ? -1 : Math.floor(y) * w + Math.floor(x);
  };
  const downX = mesh[304]! - mesh[20]!, downY = mesh[305]! - mesh[21]!;
  for (const region of regions(found, w, h)) {
    let mirrored = 0, oneSided = 0;
    for (const i of region) {
      const j = at(i);
      if (j < 0 || covered[j] === 0) continue;
      mirrored++;
      if (notSkin[j] === 0) oneSided++;
    }
    if (oneSided > 0.5 * mirrored) continue;
    for (const i of region) if (((i % w) + 0.5 - mesh[2]!) * downX + (Math.floor(i / w) + 0.5 - mesh[3]!) * downY > 0) found[i] = 0;
  }
  if (!found.includes(1)) return pixels;
  const clear = boxBlur(found, new Float32Array(n), w, h, 1, Math.max(1, CLEAR_GROW * faceSize));
  for (let i = 0; i < n; i++) clear[i] = clear[i]! > 0 && covered[i] === 1 && features[i] === 0 ? 1 : 0;

  // Clear skin (weight 1) and nothing else, then the same with the cleared pixels' mirror images.
  const around = new Float32Array(n * 4), mirrored = new Float32Array(n * 4);
  for (let i = 0; i < n; i++) {
    const clearSkin = covered[i] === 1 && features[i] === 0 && notSkin[i] === 0 && clear[i] === 0 ? 1 : 0;
    for (let c = 0; c < 3; c++) around[i * 4 + c] = mirrored[i * 4 + c] = clearSkin * rgb[i * 3 + c]!;
    around[i * 4 + 3] = mirrored[i * 4 + 3] = clearSkin;
  }
  // Not from the rim of the face: a rim light or the hair behind it on the other side came along.
  const deep = boxBlur(covered, new Float32Array(n), w, h, 1, Math.max(1, RIM * faceSize));
  for (let i = 0; i < n; i++) {
    if (clear[i] === 0) continue;
    const j = at(i);
    // A brow's mirror image is the other brow, not skin, and its tail reaches the rim.
    if (j < 0 || clear[j] === 1 || covered[j] === 0 || (brows[j] === 0 && (deep[j]! < 1 || notSkin[j] === 1))) continue;
    sampleCubic(pixels, w, h, Math.max(0, mirrorAt[2 * i]! - 0.5), Math.max(0, mirrorAt[2 * i + 1]! - 0.5), mirrored, i * 4);
    mirrored[i * 4 + 3] = 1;
  }
  for (let i = 0; i < n; i++) if (brows[i] === 1 && mirrored[i * 4 + 3] === 0) clear[i] = 0;
  pushPull(around, w, h);
  pushPull(mirrored, w, h);
  // The mirror image's light is the other side's (a face lit from one side): only its detail finer
  // than CLEAR_LIGHT is kept, over the light of the skin around the cleared region.
  const radius = Math.max(1, CLEAR_LIGHT * faceSize);
  const light = boxBlur(around, new Float32Array(n * 4), w, h, 4, radius);
  const mirrorLight = boxBlur(mirrored, new Float32Array(n * 4), w, h, 4, radius);
  // The cleared pixels fade into the photo's own where they meet its skin; at the face's outline and at
  // the features, which bound them, they do not (half the hair stayed there, a dark line).
  const bounded = new Float32Array(n);
  for (let i = 0; i < n; i++) bounded[i] = clear[i] === 1 || covered[i] === 0 || features[i] === 1 ? 1 : 0;
  const fade = boxBlur(bounded, new Float32Array(n), w, h, 1, Math.max(1, CLEAR_FEATHER * faceSize));
  const out = Uint8Array.from(pixels);
  for (let i = 0; i < n; i++) {
    if (clear[i] === 0) continue;
    const share = Math.min(clear[i]!, fade[i]!);
    for (let c = 0; c < 3; c++) {
      const value = mirrored[i * 4 + c]! + light[i * 4 + c]! - mirrorLight[i * 4 + c]!;
      out[i * 3 + c] = Math.min(255, Math.max(0, Math.round(rgb[i * 3 + c]! + share * (value - rgb[i * 3 + c]!))));
    }
  }
  return out;
}
