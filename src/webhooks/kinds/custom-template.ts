import type { Violations } from "../../platform/errors.js";
import { show, type EventView } from "./event-summary.js";

const TEMPLATE_MAX = 8192;
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

/** The body a checked template gives for an event. */
export function renderTemplate(text: string, view: EventView): unknown {
  let template = parsed.get(text);
  if (template === undefined) {
    // Bounded: a replica serving more custom templates than this parses some again, nothing worse.
    if (parsed.size >= MAX_PARSED) parsed.clear();
    template = JSON.parse(text) as Template;
    parsed.set(text, template);
  }
  return fill(template, view);
}

function fill(template: Template, view: EventView): unknown {
  if (typeof template === "string") {
    const whole = /^\{\{\s*([^{}]*?)\s*\}\}$/.exec(template);
    if (whole) return lookup(view, whole[1]!) ?? null;
    return template.replace(PLACEHOLDER, (_, path: string) => {
      const value = lookup(view, path);
      return value === undefined ? "" : show(value);
    });
  }
  if (Array.isArray(template)) return template.map((item) => fill(item, view));
  if (template !== null && typeof template === "object") {
    return Object.fromEntries(Object.entries(template).map(([key, value]) => [key, fill(value, view)]));
  }
  return template;
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
