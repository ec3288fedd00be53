import { Code, RpcError, Violations } from "./errors.js";

/** The outcome of one item of a batch: each item succeeds or fails on its own. */
export type BatchResult<T> = { ok: true; value: T } | { ok: false; error: RpcError };

/** Runs one item, keeping a caller-facing error as its result (anything else still throws). */
export async function settle<T>(run: () => Promise<T>): Promise<BatchResult<T>> {
  try {
    return { ok: true, value: await run() };
  } catch (error) {
    if (error instanceof RpcError) return { ok: false, error };
    throw error;
  }
}

/** A batch needs 1..max items. */
export function checkBatchSize(size: number, field: string, max: number): void {
  const violations = new Violations();
  if (size === 0) violations.add(field, "must not be empty");
  if (size > max) violations.add(field, `at most ${max} items per batch`);
  violations.throwIfAny();
}

/** How one item of a batch ended, as batch responses report it. */
export interface ItemStatus {
  code: Code;
  message: string;
  reason: string;
}

export const ITEM_OK: ItemStatus = { code: Code.OK, message: "", reason: "" };

export function itemStatus(error: RpcError): ItemStatus {
  return { code: error.code, message: error.message, reason: error.reason };
}
