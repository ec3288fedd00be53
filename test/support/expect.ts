import { expect } from "vitest";
import { ApiError } from "../../src/client/index.js";

/** Expects the call to fail with an API error and returns it, decoded. */
export async function failure(call: Promise<unknown>): Promise<ApiError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApiError);
  return error as ApiError;
}

/** Polls `check` until it holds; fails after timeoutMs, saying what it waited for. */
export async function until(
  check: () => Promise<boolean> | boolean,
  timeoutMs = 5_000,
  what = "the condition",
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
