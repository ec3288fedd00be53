import fs from "node:fs/promises";
import path from "node:path";
import type { DetectedFace, FaceDetectionRequest } from "../renderer.js";
import { crop, decodeFrames, encodePng, grow, NoFramesError, type RgbImage } from "./images.js";
import { abortError, untilAborted } from "./pipeline.js";
import type { FaceData } from "./protocol.js";
import { matchPerson } from "./swap-stage.js";
import { analyseImage } from "./sources.js";
import type { WorkerPool } from "./worker-pool.js";

const SAMPLED_FRAMES = 10;
const MAX_SIDE = 1280;
/** Margin around the face box in a crop, as a share of the box. */
const CROP_MARGIN = 0.3;

interface Person {
  embedding: number[];
  /** The best view of the person so far: the largest, most confident face. */
  face: FaceData;
  image: RgbImage;
  frame: number;
  index: number;
}

/**
 * The distinct people in a video (one frame a second, up to ten) or an image: faces are clustered by
 * embedding similarity and each person's best view is written as `<frame>-<index>.png`.
 */
export async function detectFaces(pool: WorkerPool, request: FaceDetectionRequest): Promise<DetectedFace[]> {
  const { signal } = request;
  const first = { maxLongSide: MAX_SIDE, maxFrames: 1, signal };
  // A clip shorter than about half a second has no frame at fps=1's first tick: its first frame stands for it.
  const { frames, fps } = request.still
    ? await decodeFrames(request.input, first)
    : await decodeFrames(request.input, { ...first, maxFrames: SAMPLED_FRAMES, filter: "fps=1" }).catch((error: unknown) => {
        if (error instanceof NoFramesError) return decodeFrames(request.input, first);
        throw error;
      });
  if (signal.aborted) throw abortError(signal);
  const analysed = await untilAborted(
    Promise.all(
      frames.map((image, k) =>
        analyseImage(pool, image, { minConfidence: request.confidence, worker: k, retryWithBorder: request.still }),
      ),
    ),
    signal,
  );
  const people: Person[] = [];
  for (const [k, found] of analysed.entries()) {
    if (signal.aborted) throw abortError(signal);
    const image = frames[k]!;
    const faces = found.filter((face) => face.score >= request.confidence).sort((a, b) => a.box[0] - b.box[0]);
    for (const [index, face] of faces.entries()) {
      if (!face.embedding) continue;
      const frame = request.still ? 0 : Math.round(k * fps);
      const match = await matchPerson(pool, 0, face.embedding, people.map((person) => person.embedding));
      const person = match >= 0 ? people[match] : undefined;
      if (!person) people.push({ embedding: face.embedding, face, image, frame, index });
      else if (quality(face) > quality(person.face)) Object.assign(person, { face, image, frame, index });
    }
  }
  await fs.mkdir(request.outputDirectory, { recursive: true });
  const detected: DetectedFace[] = [];
  for (const person of people) {
    const png = path.join(request.outputDirectory, `${person.frame}-${person.index}.png`);
    await fs.writeFile(png, encodePng(crop(person.image, grow(person.face.box, CROP_MARGIN))));
    detected.push({ frame: person.frame, index: person.index, png });
  }
  return detected;
}

function quality(face: FaceData): number {
  return face.score * face.box[2] * face.box[3];
}
