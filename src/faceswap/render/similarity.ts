/**
 * A similarity transform (rotation, scale, shift): a point p maps to `toX, toY` + [cos -sin; sin cos]
 * (p - `fromX, fromY`).
 */
export class Similarity {
  constructor(
    readonly fromX: number,
    readonly fromY: number,
    readonly toX: number,
    readonly toY: number,
    readonly cos: number,
    readonly sin: number,
  ) {}

  x(px: number, py: number): number {
    return this.toX + this.cos * (px - this.fromX) - this.sin * (py - this.fromY);
  }

  y(px: number, py: number): number {
    return this.toY + this.sin * (px - this.fromX) + this.cos * (py - this.fromY);
  }
}

/** The least-squares similarity transform that lays the points `from` over `to` (x, y pairs, same length). */
export function fitSimilarity(from: ArrayLike<number>, to: ArrayLike<number>): Similarity {
  const n = from.length / 2;
  let fromX = 0, fromY = 0, toX = 0, toY = 0;
  for (let i = 0; i < n; i++) {
    fromX += from[2 * i]!; fromY += from[2 * i + 1]!;
    toX += to[2 * i]!; toY += to[2 * i + 1]!;
  }
  fromX /= n; fromY /= n; toX /= n; toY /= n;
  let dot = 0, cross = 0, norm = 0;
  for (let i = 0; i < n; i++) {
    const ax = from[2 * i]! - fromX, ay = from[2 * i + 1]! - fromY;
    const bx = to[2 * i]! - toX, by = to[2 * i + 1]! - toY;
    dot += ax * bx + ay * by;
    cross += ax * by - ay * bx;
    norm += ax * ax + ay * ay;
  }
  return new Similarity(fromX, fromY, toX, toY, dot / norm, cross / norm);
}
