/**
 * google.api.http path templates: `/v1/{name=shelves/*}/books/{book}:verb` with literals, `*`, `**`
 * and variables binding (possibly dotted) request fields.
 */

type Segment = { kind: "literal"; value: string } | { kind: "wildcard" } | { kind: "deep" };

interface Variable {
  fieldPath: string;
  /** Index of the variable's first segment. */
  start: number;
  /** Index after its last segment. */
  end: number;
}

export interface PathTemplate {
  source: string;
  segments: Segment[];
  variables: Variable[];
  verb: string | undefined;
  /** Literal segments count: more literals sort first so `/a/b` wins over `/a/{x}`. */
  literalCount: number;
}

export class PathTemplateError extends Error {}

/** A (possibly dotted) proto field path: `name`, `namespace.name`. */
const FIELD_PATH = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;
/** The custom verb after the last segment: a non-empty literal. */
const VERB = /^[^/{}*:=]+$/;

export function parsePathTemplate(source: string): PathTemplate {
  if (!source.startsWith("/")) throw new PathTemplateError(`path template must start with "/": ${source}`);
  let rest = source.slice(1);
  let verb: string | undefined;
  // The verb follows the last ':' outside braces.
  const lastBrace = rest.lastIndexOf("}");
  const colon = rest.indexOf(":", lastBrace + 1);
  if (colon >= 0) {
    verb = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!VERB.test(verb)) throw new PathTemplateError(`bad verb "${verb}" in ${source}`);
  }

  const segments: Segment[] = [];
  const variables: Variable[] = [];
  let i = 0;
  const parts = splitOutsideBraces(rest);
  for (const part of parts) {
    if (part.startsWith("{")) {
      if (!part.endsWith("}")) throw new PathTemplateError(`unclosed variable in ${source}`);
      const inner = part.slice(1, -1);
      const eq = inner.indexOf("=");
      const fieldPath = eq >= 0 ? inner.slice(0, eq) : inner;
      if (!FIELD_PATH.test(fieldPath)) throw new PathTemplateError(`bad field path "${fieldPath}" in ${source}`);
      const pattern = eq >= 0 ? inner.slice(eq + 1).split("/") : ["*"];
      const start = i;
      for (const p of pattern) {
        segments.push(toSegment(p));
        i++;
      }
      variables.push({ fieldPath, start, end: i });
    } else {
      segments.push(toSegment(part));
      i++;
    }
  }
  const deepAt = segments.findIndex((s) => s.kind === "deep");
  if (deepAt >= 0 && deepAt !== segments.length - 1) {
    throw new PathTemplateError(`"**" must be the last segment: ${source}`);
  }
  return {
    source,
    segments,
    variables,
    verb,
    literalCount: segments.filter((s) => s.kind === "literal").length,
  };
}

function splitOutsideBraces(path: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of path) {
    if (ch === "{") depth++;
    if (ch === "}") depth--;
    if (ch === "/" && depth === 0) {
      parts.push(current);
      current = "";
    } else {
      current += ch;
    }
  }
  parts.push(current);
  return parts;
}

function toSegment(part: string): Segment {
  if (part === "*") return { kind: "wildcard" };
  if (part === "**") return { kind: "deep" };
  if (part === "" || /[{}*]/.test(part)) throw new PathTemplateError(`bad path segment "${part}"`);
  return { kind: "literal", value: part };
}

/**
 * Matches a request path (without query string) and returns the bound variables, percent-decoded,
 * or undefined. Single-segment variables decode everything (so `a%2Fb` binds "a/b"); multi-segment
 * ones keep `%2F` so their slashes stay distinguishable.
 */
export function matchPathTemplate(template: PathTemplate, path: string): Map<string, string> | undefined {
  if (!path.startsWith("/")) return undefined;
  let rest = path.slice(1);
  if (template.verb !== undefined) {
    const suffix = `:${template.verb}`;
    if (!rest.endsWith(suffix)) return undefined;
    rest = rest.slice(0, -suffix.length);
  }
  const raw = rest.split("/");
  const { segments } = template;
  const deep = segments.at(-1)?.kind === "deep";
  if (deep ? raw.length < segments.length : raw.length !== segments.length) return undefined;

  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i]!;
    const value = raw[i]!;
    if (segment.kind === "literal" && safeDecode(value) !== segment.value) return undefined;
    if (segment.kind === "wildcard" && value === "") return undefined;
  }

  const bound = new Map<string, string>();
  for (const variable of template.variables) {
    const last = variable.end === segments.length && deep ? raw.length : variable.end;
    const pieces = raw.slice(variable.start, last);
    const single = pieces.length === 1 && !deep;
    const value = single ? safeDecode(pieces[0]!) : pieces.map((p) => safeDecode(p, true)).join("/");
    if (value === undefined) return undefined;
    bound.set(variable.fieldPath, value);
  }
  return bound;
}

function safeDecode(value: string, keepSlash = false): string | undefined {
  try {
    return keepSlash ? decodeURIComponent(value.replace(/%2F/gi, "%252F")) : decodeURIComponent(value);
  } catch {
    return undefined;
  }
}
