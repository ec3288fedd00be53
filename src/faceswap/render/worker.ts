import { parentPort } from "node:worker_threads";
import type { Config, FaceResult, Tensor } from "@vladmandic/human";
import { HandFinder } from "./hands.js";
import { loadHuman } from "./human.js";
import type { FaceData, WorkerReply, WorkerRequest } from "./protocol.js";
import { mirrorPoints } from "./mirror.js";
import { swapFace, type SourceFace } from "./swap.js";
import { UprightMesher } from "./upright.js";

/**
 * One render worker: its own Human instance (tfjs WASM is single-threaded, so one per core) that
 * detects faces in the frames it is given and draws the swapped faces into them.
 */
const port = parentPort!;
const human = await loadHuman();
const mirror = mirrorPoints(human.faceUVMap);
/** Each render's hand finder: renders that share this worker must not follow each other's hands. */
const handFinders = new Map<number, HandFinder>();
/** Each render's upright mesher, which remembers the roll of its previous frame's faces. */
const uprightMeshers = new Map<number, UprightMesher>();
/** Frames between detect and finish, with the keypoints of the hands found in them. */
const held = new Map<string, { pixels: Uint8Array; width: number; height: number; hands: Float32Array[] }>();
const sources = new Map<number, SourceFace[]>();

function toFaceData(face: FaceResult, points = face.mesh): FaceData {
  const mesh = new Float32Array(points.length * 2);
  const depth = new Float32Array(points.length);
  points.forEach((point, i) => {
    mesh[i * 2] = point[0];
    mesh[i * 2 + 1] = point[1];
    depth[i] = point[2] ?? 0;
  });
  const data: FaceData = { box: [...face.box], score: face.score, mesh, depth };
  if (face.embedding?.length) data.embedding = face.embedding;
  return data;
}

/**
 * How far Human may follow the face boxes it found in its previous call. A video frame may reuse the
 * boxes of the one before it if the two differ little (`follow`); unrelated stills never (`still`).
 * The first frame of a render in this worker (`first`) is compared, so the next one has something to
 * be compared with, but never follows: Human holds the boxes of whatever it saw last, and a render
 * starting from another render's boxes came out differently depending on what ran before it.
 */
const CACHE_SENSITIVITY = { follow: 0.7, still: 0, first: -1 } as const;
/** The render whose frame Human looked at last in this worker, when that look was a frame's detection. */
let followable: number | undefined;

async function faces(
  pixels: Uint8Array,
  width: number,
  height: number,
  options: {
    describe: boolean;
    boxes: keyof typeof CACHE_SENSITIVITY;
    upright?: UprightMesher;
    minConfidence?: number;
    hands?: (frame: Tensor, faces: FaceData[]) => Promise<void>;
  },
) {
  const tensor = human.tf.tensor3d(pixels, [height, width, 3], "int32");
  try {
    const minConfidence = options.minConfidence ?? 0.3;
    // Human's own rotation stays off (see UprightMesher): only rolled heads are meshed again, upright.
    const detector = { minConfidence, rotation: false };
    // Each call sets every option it depends on: Human merges a call's config into its own.
    const config = {
      cacheSensitivity: CACHE_SENSITIVITY[options.boxes],
      face: { enabled: true, detector, description: { enabled: options.describe } },
      hand: { enabled: false },
    } as Partial<Config>;
    const result = await human.detect(tensor, config);
    const meshed = result.face.filter((face) => face.mesh.length > 0);
    const upright = (await options.upright?.meshes(tensor, meshed, minConfidence)) ?? [];
    const found = meshed.map((face, i) => toFaceData(face, upright[i]));
    await options.hands?.(tensor, found);
    return found;
  } finally {
    human.tf.dispose(tensor);
  }
}

function heldFrame(job: number, frame: number) {
  const entry = held.get(`${job}:${frame}`);
  if (!entry) throw new Error(`frame ${frame} of job ${job} is not held`);
  return entry;
}

async function handle(request: WorkerRequest): Promise<{ value: unknown; transfer?: ArrayBuffer[] }> {
  switch (request.type) {
    case "detect": {
      const pixels = new Uint8Array(request.pixels);
      const frame = { pixels, width: request.width, height: request.height, hands: [] as Float32Array[] };
      held.set(`${request.job}:${request.frame}`, frame);
      let finder = handFinders.get(request.job);
      if (!finder) handFinders.set(request.job, (finder = new HandFinder(human)));
      let upright = uprightMeshers.get(request.job);
      if (!upright) uprightMeshers.set(request.job, (upright = new UprightMesher(human, mirror, true)));
      const found = async (tensor: Tensor, faces: FaceData[]) => {
        frame.hands = await finder.find(tensor, frame, faces.map((face) => face.box));
      };
      // The frames' rolled heads are meshed again upright (see UprightMesher), or the new face's eyes and
      // mouth were drawn beside the target's. Embeddings (describe, analyse) are taken unturned:
      // turned, two different people of a demo photo scored 0.66, past the same-person threshold
      // (0.57 unturned).
      const boxes = followable === request.job ? "follow" : "first";
      followable = request.job;
      return { value: await faces(pixels, request.width, request.height, { describe: false, boxes, upright, hands: found }) };
    }
    case "describe": {
      const { pixels, width, height } = heldFrame(request.job, request.frame);
      followable = undefined;
      return { value: await faces(pixels, width, height, { describe: true, boxes: "still" }) };
    }
    case "finish": {
      const { pixels, width, height, hands: handPoints } = heldFrame(request.job, request.frame);
      held.delete(`${request.job}:${request.frame}`);
      const jobSources = sources.get(request.job) ?? [];
      for (const target of request.targets) {
        const source = jobSources[target.source];
        if (source) swapFace(pixels, width, height, target.mesh, target.depth, target.neutral, source, human.faceTriangulation, mirror, request.style, handPoints);
      }
      return { value: pixels.buffer, transfer: [pixels.buffer as ArrayBuffer] };
    }
    case "analyse": {
      const pixels = new Uint8Array(request.pixels);
      followable = undefined;
      return { value: await faces(pixels, request.width, request.height, { describe: true, boxes: "still", upright: request.upright ? new UprightMesher(human, mirror, false) : undefined, minConfidence: request.minConfidence }) };
    }
    case "similarities":
      return { value: request.candidates.map((candidate) => human.match.similarity(request.embedding, candidate)) };
    case "sources":
      sources.set(request.job, request.sources);
      return { value: null };
    case "end":
      sources.delete(request.job);
      handFinders.delete(request.job);
      uprightMeshers.delete(request.job);
      for (const key of held.keys()) if (key.startsWith(`${request.job}:`)) held.delete(key);
      return { value: null };
  }
}

// One request at a time: a Human instance keeps per-call state (its config, the cached face boxes).
let queue: Promise<void> = Promise.resolve();
port.on("message", (request: WorkerRequest) => {
  queue = queue.then(() => handle(request)).then(
    ({ value, transfer }) => port.postMessage({ type: "result", id: request.id, value } satisfies WorkerReply, transfer ?? []),
    (error: unknown) =>
      port.postMessage({ type: "error", id: request.id, message: error instanceof Error ? error.message : String(error) } satisfies WorkerReply),
  );
});
port.postMessage({ type: "ready" } satisfies WorkerReply);
