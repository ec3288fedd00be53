import type { Violations } from "../../platform/errors.js";
import { jsonDepth } from "../../platform/json-depth.js";
import { show, type EventView } from "./event-summary.js";

const TEMPLATE_MAX = 8192;
/** Arrays and objects inside one another, at most: enough for any message shape a receiver takes. */
const TEMPLATE_DEPTH = 32;
/**
 * The most a template's placeholders may put into one body: `{{data}}` written 600 times turned 10 KB of
 * data into 6.5 MB, and 1 MB of data into more than a string can hold.
 */
export const TEMPLATE_OUTPUT_MAX = 1024 * 1024;
/** `{{ path }}`: event, timestamp, delivery_id, data, or data's fields by name or index. */
const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
const PATH = /^(event|timestamp|delivery_id|data(\.[A-Za-z0-9_-]+)*)$/;

/**
 * A custom kind's body: a JSON document, any of whose strings may hold placeholders. A string that is
 * exactly one placeholder becomes the value itself (a number stays a number, an object an object);
 * placeholders inside longer strings become text. Nothing is evaluated: a path only looks values up.
 */
export type Template = unknown;

/** Checks a template, naming what is wrong in `settings.template`. */
export function checkTemplate(violations: Violations, text: string | undefined): void {
  const field = "settings.template";
  if (text === undefined || text.trim() === "") {
    violations.add(field, "is required for kind custom: a JSON document such as {\"msg\": \"{{event}} for {{data.trace_id}}\"}");
    return;
  }
  if (text.length > TEMPLATE_MAX) {
    violations.add(field, `must be at most ${TEMPLATE_MAX} characters`);
    return;
  }
  let template: unknown;
  try {
    template = JSON.parse(text);
  } catch (error) {
    violations.add(field, `is not valid JSON (${(error as Error).message})`);
    return;
  }
  if (jsonDepth(template, TEMPLATE_DEPTH) > TEMPLATE_DEPTH) {
    violations.add(field, `nests arrays and objects deeper than ${TEMPLATE_DEPTH} levels`);
    return;
  }
  const problems: string[] = [];
  walkStrings(template, (s) => {
    const stray = s.replace(PLACEHOLDER, "");
    if (stray.includes("{{") || stray.includes("}}")) problems.push(`unbalanced braces in "${s}"`);
    for (const [, path] of s.matchAll(PLACEHOLDER)) {
      if (!PATH.test(path!)) problems.push(`"{{${path}}}" is not event, timestamp, delivery_id or data.<field>`);
    }
  });
  for (const problem of problems.slice(0, 5)) violations.add(field, problem);
}

/** Parsed templates by their text: a webhook's template is parsed once, not on every delivery. */
const parsed = new Map<string, Template>();
const MAX_PARSED = 1_000;

/** A body that no attempt can make for this event: sending it again would fail the same way. */
export class UnsendableBody extends Error {}

/**
 * The body a checked template gives for an event. Throws UnsendableBody when its placeholders would
 * put more than TEMPLATE_OUTPUT_MAX characters into it, or when it cannot be filled at all (one
 * stored before templates were bounded, nested past the stack).
 */
export function renderTemplate(text: string, view: EventView): unknown {
  let template = parsed.get(text);
  if (template === undefined) {
    // Bounded: a replica serving more custom templates than this parses some again, nothing worse.
    if (parsed.size >= MAX_PARSED) parsed.clear();
    template = JSON.parse(text) as Template;
    parsed.set(text, template);
  }
  try {
    return fill(template, view, { left: TEMPLATE_OUTPUT_MAX });
  } catch (error) {
    if (error instanceof RangeError) throw new UnsendableBody(`the template cannot be filled for this event (${error.message})`);
    throw error;
  }
}

/** Characters the placeholders of one body may still add. */
interface Budget {
  left: number;
}

function fill(template: Template, view: EventView, budget: Budget): unknown {
  if (typeof template === "string") {
    const whole = /^\{\{\s*([^{}]*?)\s*\}\}$/.exec(template);
    if (whole) {
      const value = lookup(view, whole[1]!) ?? null;
      spend(budget, typeof value === "string" ? value.length : JSON.stringify(value).length);
      return value;
    }
    return template.replace(PLACEHOLDER, (_, path: string) => {
      const value = lookup(view, path);
      const shown = value === undefined ? "" : show(value);
      spend(budget, shown.length);
      return shown;
    });
  }
  if (Array.isArray(template)) return template.map((item) => fill(item, view, budget));
  if (template !== null && typeof template === "object") {
    return Object.fromEntries(Object.entries(template).map(([key, value]) => [key, fill(value, view, budget)]));
  }
  return template;
}

function spend(budget: Budget, characters: number): void {
  budget.left -= characters;
  if (budget.left < 0) throw new UnsendableBody(`the template's placeholders make a body of more than ${TEMPLATE_OUTPUT_MAX} characters for this event`);
}


function lookup(view: EventView, path: string): unknown {
  let value: unknown = view;
  for (const step of path.split(".")) {
    if (value === null || typeof value !== "object" || !Object.hasOwn(value, step)) return undefined;
    value = (value as Record<string, unknown>)[step];
  }
  return value;
}

function walkStrings(value: unknown, visit: (s: string) => void): void {
  if (typeof value === "string") visit(value);
  else if (Array.isArray(value)) value.forEach((item) => walkStrings(item, visit));
  else if (value !== null && typeof value === "object") Object.values(value).forEach((item) => walkStrings(item, visit));
}
