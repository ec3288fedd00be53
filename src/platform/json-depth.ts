/**
 * How deep arrays and objects nest in a parsed JSON value, found without recursion (a stranger's
 * value may nest deeper than the stack goes); the walk stops once it passes `stopAbove`.
 */
export function jsonDepth(json: unknown, stopAbove: number): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[json, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (typeof value !== "object" || value === null) continue;
    deepest = Math.max(deepest, depth);
    if (depth > stopAbove) break;
    for (const item of Object.values(value)) stack.push([item, depth + 1]);
  }
  return deepest;
}
