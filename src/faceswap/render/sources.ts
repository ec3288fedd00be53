import { RenderError, type RenderRequest } from "../renderer.js";
import { crop, decodeFrames, grow, type RgbImage } from "./images.js";
import type { FaceData } from "./protocol.js";
import type { SourceFace } from "./swap.js";
import type { WorkerPool } from "./worker-pool.js";

/** Faces drawn in a job and, for individual-faces, the embedding of the person each replaces. */
export interface JobFaces {
  sources: SourceFace[];
  /** originals[i] is the face that sources[i] replaces (individual-faces only). */
  originals: number[][];
}

const SOURCE_MAX_SIDE = 1024;
// The detector misses a face that fills the whole picture (a tight crop); such images are retried
// with a border around them.
const BORDER = 0.5;

/**
 * The faces in an image, largest first, with embeddings unless `describe` is false; `worker` picks
 * the pool's worker. `upright` meshes rolled heads again from crops turned upright, as the renderer
 * meshes video frames (see UprightMesher); `eyes` reads how open their eyes are (see eyeOpenness).
 */
export async function analyseImage(
  pool: WorkerPool,
  image: RgbImage,
  options: { minConfidence: number; worker: number; retryWithBorder: boolean; upright?: boolean; eyes?: boolean; describe?: boolean },
): Promise<FaceData[]> {
  const found = await analyse(pool, image, options);
  if (found.length > 0 || !options.retryWithBorder) return found;
  const bx = Math.round(image.width * BORDER);
  const by = Math.round(image.height * BORDER);
  const bordered = addBorder(image, bx, by);
  return (await analyse(pool, bordered, options)).map((face) => movedFace(face, -bx, -by));
}

/** `face` (found in a crop) moved by (dx, dy): where it lies in the picture the crop was cut from. */
export function movedFace(face: FaceData, dx: number, dy: number): FaceData {
  return { ...face, box: [face.box[0] + dx, face.box[1] + dy, face.box[2], face.box[3]], mesh: shiftMesh(face.mesh, -dx, -dy) };
}

/** The mesh (x, y pairs) moved by (-dx, -dy). */
function shiftMesh(mesh: Float32Array, dx: number, dy: number): Float32Array {
  return mesh.map((v, i) => v - (i % 2 === 0 ? dx : dy));
}

async function analyse(
  pool: WorkerPool,
  image: RgbImage,
  options: { minConfidence: number; worker: number; upright?: boolean; eyes?: boolean; describe?: boolean },
): Promise<FaceData[]> {
  // A copy: the caller keeps the image, and the copy is transferred.
  const pixels = new Uint8Array(image.pixels).buffer;
  const { width, height } = image;
  const request = { type: "analyse", pixels, width, height, minConfidence: options.minConfidence, upright: options.upright ?? false, eyes: options.eyes ?? false, describe: options.describe ?? true } as const;
  const faces = await pool.call<FaceData[]>(options.worker, request, [pixels]);
  return faces.sort((a, b) => b.box[2] * b.box[3] - a.box[2] * a.box[3]);
}

function addBorder(image: RgbImage, bx: number, by: number): RgbImage {
  const width = image.width + 2 * bx;
  const height = image.height + 2 * by;
  const pixels = new Uint8Array(width * height * 3).fill(128);
  for (let row = 0; row < image.height; row++) {
    pixels.set(image.pixels.subarray(row * image.width * 3, (row + 1) * image.width * 3), ((row + by) * width + bx) * 3);
  }
  return { pixels, width, height };
}

/**
 * The largest face of an image file, with its embedding if `describe`; a picture without one fails
 * with `no_face_in_source`, naming the request's `field` that gave it (the file is a copy the job
 * owner never named).
 */
async function largestFace(
  pool: WorkerPool,
  file: string,
  field: string,
  signal: AbortSignal,
  describe: boolean,
  worker: number,
): Promise<{ image: RgbImage; face: FaceData }> {
  let image: RgbImage;
  try {
    image = (await decodeFrames(file, { maxLongSide: SOURCE_MAX_SIDE, maxFrames: 1, signal })).frames[0]!;
  } catch (error) {
    if (signal.aborted) throw error;
    throw new RenderError("no_face_in_source", `${field} is not a readable picture: ${(error as Error).message}`);
  }
  const face = (await analyseImage(pool, image, { minConfidence: 0.3, worker, retryWithBorder: true, describe }))[0];
  if (!face) throw new RenderError("no_face_in_source", `no face found in ${field}`);
  if (describe && !face.embedding) throw new RenderError("no_face_in_source", `no face to recognise in ${field}`);
  return { image, face };
}

/** A new face: drawn, never compared, so it needs no embedding. */
async function sourceFace(pool: WorkerPool, file: string, field: string, signal: AbortSignal, worker: number): Promise<SourceFace> {
  const { image, face } = await largestFace(pool, file, field, signal, false, worker);
  const region = crop(image, grow(face.box, 0.2));
  return { pixels: region.pixels, width: region.width, height: region.height, mesh: shiftMesh(face.mesh, region.x, region.y) };
}

/**
 * Detects and meshes the job's new faces (and the originals they replace) once per job, all of them
 * at once, spread over the workers (an original's embedding alone took about 320 ms).
 */
export async function loadJobFaces(pool: WorkerPool, request: RenderRequest): Promise<JobFaces> {
  if (request.mode === "all-faces") {
    if (!request.face) throw new RenderError("no_face_in_source", "all-faces needs a face image");
    return { sources: [await sourceFace(pool, request.face, "assets.image_file_path", request.signal, 0)], originals: [] };
  }
  const { mappings, signal } = request;
  const mapping = (i: number) => `assets.face_mappings[${i}]`;
  const [originals, sources] = await Promise.all([
    Promise.all(
      mappings.map(async ({ originalFace }, i) => (await largestFace(pool, originalFace, `${mapping(i)}.original_face`, signal, true, 2 * i + 1)).face.embedding!),
    ),
    Promise.all(mappings.map(({ newFace }, i) => sourceFace(pool, newFace, `${mapping(i)}.new_face`, signal, 2 * i))),
  ]);
  return { sources, originals };
}
