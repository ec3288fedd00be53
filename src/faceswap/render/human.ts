import fs from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type { Config, FaceResult, Human, Tensor } from "@vladmandic/human";

const require = createRequire(import.meta.url);
// The package's exports map resolves "node" to the tfjs-node build (native, not installed); the WASM
// build sits next to it but is not exported, so it is loaded by path.
const humanDist = path.dirname(require.resolve("@vladmandic/human"));
const modelsDir = path.join(humanDist, "..", "models");
const wasmDir = path.dirname(require.resolve("@tensorflow/tfjs-backend-wasm"));

// Node's fetch has no file: scheme; models are requested from this made-up origin and read from disk.
const MODEL_ORIGIN = "http://human-models.invalid/";

function serveModelsFromDisk(): void {
  const networkFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (!url.startsWith(MODEL_ORIGIN)) return networkFetch(input, init);
    const file = path.join(modelsDir, path.basename(new URL(url).pathname));
    return new Response(await fs.readFile(file));
  };
}

/**
 * Face detection and 468-point mesh; the embedding model and the hand models (see HandFinder) are
 * loaded too and switched on per call when needed, and the iris model for eyeOpenness, which runs it
 * itself.
 */
const config: Partial<Config> = {
  backend: "wasm",
  wasmPath: `${wasmDir}/`,
  modelBasePath: MODEL_ORIGIN,
  warmup: "none",
  debug: false,
  // Human never reuses face boxes here (every call sets cacheSensitivity 0): between detections a
  // render's faces are followed by FaceFollower, which runs the detector again after skipFrames
  // frames, by count and never by time: by time, how busy the machine was decided which frames were
  // detected afresh, and the same video rendered differently from run to run.
  filter: { enabled: false } as Config["filter"],
  gesture: { enabled: false },
  body: { enabled: false } as Config["body"],
  hand: { enabled: false, detector: { modelPath: "handtrack.json" }, skeleton: { modelPath: "handlandmark-lite.json" } } as Config["hand"],
  object: { enabled: false } as Config["object"],
  segmentation: { enabled: false } as Config["segmentation"],
  face: {
    enabled: true,
    detector: { rotation: false, maxDetected: 20, skipFrames: 6, skipTime: Number.MAX_SAFE_INTEGER, minConfidence: 0.3, return: false },
    mesh: { enabled: true },
    iris: { enabled: false },
    emotion: { enabled: false },
    // Embeddings are asked for rarely and must belong to the picture given, never a cached one.
    description: { enabled: false, skipFrames: 0, skipTime: 0 },
    antispoof: { enabled: false },
    liveness: { enabled: false },
    attention: { enabled: false },
  } as Config["face"],
};

export async function loadHuman(): Promise<Human> {
  serveModelsFromDisk();
  const module = (await import(pathToFileURL(path.join(humanDist, "human.node-wasm.js")).href)) as typeof import("@vladmandic/human");
  const human = new module.Human(config);
  await human.load({ face: { description: { enabled: true }, iris: { enabled: true } }, hand: { enabled: true } } as Partial<Config>);
  // Loading merged the switch into Human's config; off again, Human's own meshes stay without it.
  human.config.face.iris!.enabled = false;
  return human;
}

/**
 * The faces Human finds afresh in `frame` (a [height, width, 3] tensor of 0-255 values), each with its
 * mesh; its own rotation stays off (see UprightMesher).
 */
export async function detectAfresh(human: Human, frame: Tensor, options: { minConfidence: number; describe: boolean }): Promise<FaceResult[]> {
  return (await human.detect(frame, faceConfig(options.minConfidence, true, options.describe))).face.filter((face) => face.mesh.length > 0);
}

/**
 * The boxes ([x, y, width, height], frame pixels) of the faces the detector finds in `frame`, none
 * meshed: about two thirds of what detectAfresh costs for three faces.
 */
export async function detectBoxes(human: Human, frame: Tensor, minConfidence: number): Promise<Array<[number, number, number, number]>> {
  return (await human.detect(frame, faceConfig(minConfidence, false, false))).face.map((face) => [face.box[0], face.box[1], face.box[2], face.box[3]]);
}

/**
 * A call's options for finding faces afresh (cacheSensitivity 0), hands off, each option the call
 * depends on set: Human merges a call's config into its own, so one left out is the last call's.
 */
function faceConfig(minConfidence: number, mesh: boolean, describe: boolean): Partial<Config> {
  return {
    cacheSensitivity: 0,
    face: { enabled: true, mesh: { enabled: mesh }, detector: { minConfidence, rotation: false }, description: { enabled: describe } },
    hand: { enabled: false },
  } as Partial<Config>;
}
