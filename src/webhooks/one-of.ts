import type { Violations } from "../platform/errors.js";

/**
 * `value` when it is a key of `choices`, a record with an entry for every member of a value set
 * (the compiler checks it is complete); otherwise names `field` in `violations` with the choices.
 */
export function oneOf<K extends string>(violations: Violations, field: string, value: string, choices: Record<K, unknown>): K | undefined {
  if (Object.hasOwn(choices, value)) return value as K;
  violations.add(field, `must be one of ${Object.keys(choices).join(", ")}`);
  return undefined;
}
