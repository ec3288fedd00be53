import type { Config, Human, Tensor } from "@vladmandic/human";

/**
 * Finds hands in consecutive video frames (one worker's share of them) with Human's hand models
 * (handtrack finds the boxes, handlandmark-lite the 21 keypoints in each). Finding them costs about
 * as much as the face meshes of three faces, so it runs only on frames with a face: while no hand is
 * seen, on every HAND_INTERVAL-th such frame; once one is, every frame, with the keypoints followed
 * from the previous frame's hands (the landmark model alone on boxes around them) and the boxes
 * searched again on every HAND_REDETECT-th frame, so a second hand is not missed for long.
 */
export class HandFinder {
  private sinceSearch = Infinity;
  private following = false;
  /** Hands Human holds from its last call (those the keypoint model lost too), which it follows. */
  private held = 0;

  constructor(private readonly human: Human) {}

  /** The keypoints (x, y pairs in frame pixels) of each hand in `frame`, which has `faces` faces. */
  async find(frame: Tensor, faces: number): Promise<Float32Array[]> {
    if (faces === 0) {
      this.following = false;
      return [];
    }
    this.sinceSearch++;
    const search = this.sinceSearch >= (this.following ? HAND_REDETECT : HAND_INTERVAL);
    if (!search && !this.following) return [];
    if (search) this.sinceSearch = 0;
    // Human follows the hands it holds (the keypoint model on boxes around them) instead of searching
    // when the frame counts as unchanged (a sensitivity past any difference makes every frame so; 0
    // would also make it drop the boxes it follows) and it holds `maxDetected` hands. skipFrames and
    // skipTime 0: it never hands back the previous frame's keypoints as they were (a hand moves).
    const config = {
      cacheSensitivity: UNCHANGED,
      face: { enabled: false },
      hand: { enabled: true, minConfidence: HAND_SCORE, maxDetected: search ? HAND_MAX : this.held, skipFrames: 0, skipTime: 0, rotation: true, landmarks: true },
    } as Partial<Config>;
    const result = await this.human.detect(frame, config);
    this.held = result.hand.length;
    const hands = result.hand.filter((hand) => hand.fingerScore >= FINGER_SCORE && hand.keypoints.length === 21);
    this.following = hands.length > 0;
    return hands.map((hand) => Float32Array.from(hand.keypoints.flatMap((point) => [point[0], point[1]])));
  }
}

/** Frames with a face between searches for hands while none is seen (a worker sees every Nth frame of a video). */
const HAND_INTERVAL = 3;
/** Frames between searches for new hands while following one. */
const HAND_REDETECT = 6;
const UNCHANGED = 1e9;
/** Hands searched for; a search while Human holds this many follows them instead. */
const HAND_MAX = 4;
// A real hand half hidden behind a face's outline scored 0.39 on the box model; the keypoint model's
// score tells the hands from the rest: 0.73-0.74 on hands, 0.51 on the knuckles, sleeves and glasses it
// boxed on the test photos.
const HAND_SCORE = 0.3;
const FINGER_SCORE = 0.6;
