/**
 * For each point of the face mesh, the point at the same place on the other side of the face (a point
 * on the middle line is its own): the nearest to its mirror image in the mesh's texture map `uv`
 * (u across the face, v down it), which is symmetric about u = 0.5.
 */
export function mirrorPoints(uv: ReadonlyArray<readonly [number, number] | readonly number[]>): Int32Array {
  const mirror = new Int32Array(uv.length);
  for (let i = 0; i < uv.length; i++) {
    const u = 1 - uv[i]![0]!, v = uv[i]![1]!;
    let best = i, distance = Infinity;
    for (let j = 0; j < uv.length; j++) {
      const d = (uv[j]![0]! - u) ** 2 + (uv[j]![1]! - v) ** 2;
      if (d < distance) {
        distance = d;
        best = j;
      }
    }
    mirror[i] = best;
  }
  return mirror;
}
