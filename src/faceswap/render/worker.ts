import { parentPort } from "node:worker_threads";
import type { Point, Tensor } from "@vladmandic/human";
import { eyeOpenness } from "./eye-openness.js";
import { FaceFollower } from "./face-follower.js";
import { HandFinder } from "./hands.js";
import { detectAfresh, loadHuman } from "./human.js";
import { crop, grow } from "./images.js";
import { noStageTimes, RENDER_ENDED, type FaceData, type StageTimes, type WorkerReply, type WorkerRequest } from "./protocol.js";
import { mirrorPoints } from "./mirror.js";
import { movedFace } from "./sources.js";
import { swapFace, type SourceFace } from "./swap.js";
import { UprightMesher, type MeshFrame } from "./upright.js";

/**
 * One render worker: its own Human instance (tfjs WASM is single-threaded, so one per core) that
 * detects faces in the frames it is given and draws the swapped faces into them.
 */
const port = parentPort!;
const human = await loadHuman();
const mirror = mirrorPoints(human.faceUVMap);
/** Each render's hand finder: renders that share this worker must not follow each other's hands. */
const handFinders = new Map<number, HandFinder>();
/** Each render's face follower (see FaceFollower). */
const followers = new Map<number, FaceFollower>();
/** Faces of video frames scored below this by the mesh model are dropped. */
const VIDEO_MIN_CONFIDENCE = 0.3;
/** A face to embed is found again in its box grown by this share on every side (the detector misses a face that fills its picture). */
const DESCRIBE_MARGIN = 0.5;
/** Frames between detect and finish, with the keypoints of the hands found in them. */
const held = new Map<string, { pixels: Uint8Array; width: number; height: number; hands: Float32Array[] }>();
const sources = new Map<number, SourceFace[]>();
/** Each render's time on this worker, by part. */
const stageTimes = new Map<number, StageTimes>();
/**
 * Renders whose end has been asked for: a cancelled or failed render's frames still queued here are
 * answered at once, undone, so the next render does not wait for frames nobody will write.
 */
const ending = new Set<number>();

/** `work`, its time added to `stage` of render `job`. */
async function timed<T>(job: number, stage: keyof StageTimes, work: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    return await work();
  } finally {
    let times = stageTimes.get(job);
    if (!times) stageTimes.set(job, (times = noStageTimes()));
    times[stage] += performance.now() - started;
  }
}

function toFaceData(face: { box: readonly number[]; score: number; mesh: Point[]; embedding?: number[] | undefined }, points = face.mesh): FaceData {
  const mesh = new Float32Array(points.length * 2);
  const depth = new Float32Array(points.length);
  points.forEach((point, i) => {
    mesh[i * 2] = point[0];
    mesh[i * 2 + 1] = point[1];
    depth[i] = point[2] ?? 0;
  });
  const data: FaceData = { box: [face.box[0]!, face.box[1]!, face.box[2]!, face.box[3]!], score: face.score, mesh, depth };
  if (face.embedding?.length) data.embedding = face.embedding;
  return data;
}

/**
 * The frame for `use`, its tensor (float32: every kernel that reads it casts an int32 one whole on
 * each call) made if `use` asks for it and disposed after.
 */
async function withFrame<T>(pixels: Uint8Array, width: number, height: number, use: (frame: MeshFrame) => Promise<T>): Promise<T> {
  let tensor: Tensor | undefined;
  try {
    return await use({ pixels, width, height, tensor: () => (tensor ??= human.tf.tensor3d(pixels, [height, width, 3], "float32")) });
  } finally {
    if (tensor) human.tf.dispose(tensor);
  }
}

/**
 * The faces of a still image, with embeddings if `describe` (taken unturned: turned, two different
 * people of a demo photo scored 0.66, past the same-person threshold, 0.57 unturned); `upright`:
 * rolled heads' meshes taken again upright (see UprightMesher).
 */
async function stillFaces(pixels: Uint8Array, width: number, height: number, options: { upright: boolean; minConfidence: number; eyes: boolean; describe: boolean }) {
  return withFrame(pixels, width, height, async (frame) => {
    const meshed = await detectAfresh(human, frame.tensor(), { minConfidence: options.minConfidence, describe: options.describe });
    const upright = options.upright ? await new UprightMesher(human, mirror).meshes(frame, meshed, options.minConfidence) : [];
    const faces = meshed.map((face, i) => toFaceData(face, upright[i]?.mesh));
    if (options.eyes) await readEyes(frame, faces, meshed.map((face, i) => upright[i]?.mesh ?? face.mesh));
    return faces;
  });
}

/** Sets how open the eyes of `faces` are (see eyeOpenness), each read on its mesh in `meshes`. */
async function readEyes(frame: MeshFrame, faces: FaceData[], meshes: Point[][]): Promise<void> {
  const openness = await eyeOpenness(human, frame, meshes);
  faces.forEach((face, i) => (face.eyes = openness[i] ?? null));
}

function heldFrame(job: number, frame: number) {
  const entry = held.get(`${job}:${frame}`);
  if (!entry) throw new Error(`frame ${frame} of job ${job} is not held`);
  return entry;
}

async function handle(request: WorkerRequest): Promise<{ value: unknown; transfer?: ArrayBuffer[] }> {
  if ((request.type === "detect" || request.type === "describe" || request.type === "finish") && ending.has(request.job)) {
    throw new Error(RENDER_ENDED);
  }
  switch (request.type) {
    case "detect": {
      const pixels = new Uint8Array(request.pixels);
      const frame = { pixels, width: request.width, height: request.height, hands: [] as Float32Array[] };
      held.set(`${request.job}:${request.frame}`, frame);
      let finder = handFinders.get(request.job);
      if (!finder) handFinders.set(request.job, (finder = new HandFinder(human)));
      let follower = followers.get(request.job);
      if (!follower) followers.set(request.job, (follower = new FaceFollower(human, mirror, VIDEO_MIN_CONFIDENCE)));
      const found = await withFrame(pixels, request.width, request.height, async (meshFrame) => {
        const followed = await timed(request.job, "faces", () => follower.faces(meshFrame, request.mesh));
        const faces = followed?.map((face) => toFaceData(face));
        if (followed && faces && request.eyes) await timed(request.job, "eyes", () => readEyes(meshFrame, faces, followed.map((face) => face.mesh)));
        // The faces' extents, not their boxes: the hand finder reads the surroundings of each, which
        // moved against the footage whenever a detection stepped a box's size.
        frame.hands = await timed(request.job, "hands", () => finder.find(meshFrame, follower.extents));
        return faces ?? null;
      });
      return { value: found };
    }
    case "describe": {
      // Only the faces asked about are embedded, each found again in a crop around it: embedding
      // every face of the frame cost about 300 ms a face.
      const frame = heldFrame(request.job, request.frame);
      const faces: FaceData[] = [];
      await timed(request.job, "identify", async () => {
        for (const box of request.boxes) {
          const region = crop(frame, grow(box, DESCRIBE_MARGIN));
          const found = await stillFaces(region.pixels, region.width, region.height, { upright: false, minConfidence: VIDEO_MIN_CONFIDENCE, eyes: false, describe: true });
          faces.push(...found.map((face) => movedFace(face, region.x, region.y)));
        }
      });
      return { value: faces };
    }
    case "finish": {
      const { pixels, width, height, hands: handPoints } = heldFrame(request.job, request.frame);
      held.delete(`${request.job}:${request.frame}`);
      const jobSources = sources.get(request.job) ?? [];
      await timed(request.job, "draw", async () => {
        for (const target of request.targets) {
          const source = jobSources[target.source];
          if (source) swapFace(pixels, width, height, target.mesh, target.depth, target.neutral, target.lowered, source, human.faceTriangulation, mirror, request.style, handPoints);
        }
      });
      return { value: pixels.buffer, transfer: [pixels.buffer as ArrayBuffer] };
    }
    case "analyse": {
      const pixels = new Uint8Array(request.pixels);
      return { value: await stillFaces(pixels, request.width, request.height, { upright: request.upright, minConfidence: request.minConfidence, eyes: request.eyes, describe: request.describe }) };
    }
    case "similarities":
      return { value: request.candidates.map((candidate) => human.match.similarity(request.embedding, candidate)) };
    case "sources":
      sources.set(request.job, request.sources);
      return { value: null };
    case "end": {
      ending.delete(request.job);
      const times = stageTimes.get(request.job) ?? noStageTimes();
      stageTimes.delete(request.job);
      sources.delete(request.job);
      handFinders.delete(request.job);
      followers.delete(request.job);
      for (const key of held.keys()) if (key.startsWith(`${request.job}:`)) held.delete(key);
      return { value: times };
    }
  }
}

/** Resolves after the messages waiting on the port have been taken in (see `end`). */
const messagesTaken = () => new Promise<void>((resolve) => setImmediate(resolve));

// One request at a time: a Human instance keeps per-call state (the config each call merges into its
// own). Between two, the port's waiting messages are taken in: requests run on from one to the next
// without the event loop's turn, so a render's end sent meanwhile was read only after all of its frames.
let queue: Promise<void> = Promise.resolve();
port.on("message", (request: WorkerRequest) => {
  if (request.type === "end") ending.add(request.job);
  queue = queue.then(messagesTaken).then(() => handle(request)).then(
    ({ value, transfer }) => port.postMessage({ type: "result", id: request.id, value } satisfies WorkerReply, transfer ?? []),
    (error: unknown) =>
      port.postMessage({ type: "error", id: request.id, message: error instanceof Error ? error.message : String(error) } satisfies WorkerReply),
  );
});
port.postMessage({ type: "ready" } satisfies WorkerReply);
