// Per-frame buffers are reused (grown as needed): allocating them for every face made the garbage
// collector the largest cost of a swap. A view holds the previous face's values: a caller that does not
// write every element zeroes it first.
const buffers = new Map<string, Float32Array>();

/** The reusable buffer `name`, `length` elements long. */
export function scratch(name: string, length: number): Float32Array {
  let buffer = buffers.get(name);
  if (!buffer || buffer.length < length) buffers.set(name, (buffer = new Float32Array(length * 1.25)));
  return buffer.subarray(0, length);
}
