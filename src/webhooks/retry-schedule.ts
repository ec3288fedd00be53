import type { DeliveryState, RetrySchedule } from "../platform/db/schema.js";
import { oneOf, type Violations } from "../platform/errors.js";

/**
 * The gap before each retry, in units of the retry base (1 s unless configured). seed (the default):
 * 1, 2, 4. extended: Svix's schedule, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, about 27.6 hours
 * in all, so a receiver down for a day still gets the event.
 */
const GAPS: Record<RetrySchedule, readonly number[]> = {
  seed: [1, 2, 4],
  extended: [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000],
};
/** Extended gaps vary by this fraction either way, so receivers that failed together are not retried together. */
const JITTER = 0.2;
/** Retry-After is honoured up to this long; a receiver asking for more is tried again after it. */
export const RETRY_AFTER_MAX_MS = 60 * 60 * 1000;

/** The schedule when it is one; otherwise names `retry_schedule` in `violations`. */
export function checkRetrySchedule(violations: Violations, schedule: string): RetrySchedule | undefined {
  return oneOf(violations, "retry_schedule", schedule, GAPS);
}

/**
 * When attempt number `attempt` (1-based) is tried again, or undefined when it is not: after a 2xx,
 * after a final status (3xx, and 4xx other than 429), or when the schedule is used up. 5xx, 429 and
 * network failures are retried; a 429 or 503 with Retry-After no sooner than it asks (up to an hour).
 */
export function nextAttemptAt(
  schedule: RetrySchedule,
  attempt: number,
  outcome: { status: number; retryAfter?: string },
  baseMs: number,
  now: Date,
  random: () => number = Math.random,
): Date | undefined {
  const { status } = outcome;
  if (!isRetryable(status)) return undefined;
  const gaps = GAPS[schedule];
  if (attempt > gaps.length) return undefined;
  let waitMs = gaps[attempt - 1]! * baseMs;
  if (schedule === "extended") waitMs *= 1 - JITTER + 2 * JITTER * random();
  if ((status === 429 || status === 503) && outcome.retryAfter !== undefined) {
    const askedMs = retryAfterMs(outcome.retryAfter, now);
    if (askedMs !== undefined) waitMs = Math.max(waitMs, Math.min(askedMs, RETRY_AFTER_MAX_MS));
  }
  return new Date(now.getTime() + Math.round(waitMs));
}

/** Retry-After as delay-seconds or an HTTP date; undefined when it is neither. */
function retryAfterMs(value: string, now: Date): number | undefined {
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now.getTime());
}

/** 5xx, 429 and network failures (status 0) are worth trying again; any other answer is final. */
function isRetryable(status: number): boolean {
  return status === 0 || status === 429 || status >= 500;
}

/**
 * Where an attempt leaves its delivery: pending while a retry is due; delivered after a 2xx or a
 * final answer (3xx, 4xx other than 429), success false for the latter; failed when a retryable
 * outcome has no retry left, whatever its status.
 */
export function stateAfter(status: number, retryAt: Date | undefined): DeliveryState {
  if (retryAt) return "pending";
  return isRetryable(status) ? "failed" : "delivered";
}
