/** A fixed sequence of numbers in [0, 1) from `seed` (a linear congruential generator), so a failure is the same on every run. */
export function sequence(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}
