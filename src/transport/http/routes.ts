import { getOption, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { registry } from "../descriptors.js";
import type { RoutedMethod, Router } from "../router.js";
import { matchPathTemplate, parsePathTemplate, type PathTemplate } from "./path-template.js";

export interface Route {
  verb: string;
  template: PathTemplate;
  /** "" (no body), "*" (the whole request) or a top-level request field. */
  body: string;
  /** The top-level response field that is the HTTP body (response_body); undefined: the whole response. */
  responseField: (DescField & { fieldKind: "message" }) | undefined;
  method: RoutedMethod;
  input: DescMessage;
  output: DescMessage;
}

export type Match = { route: Route; variables: Map<string, string> };


interface HttpRule {
  pattern: { case: string | undefined; value: unknown };
  body: string;
  responseBody: string;
  additionalBindings?: HttpRule[];
}

const httpRuleExtension = registry.getExtension("google.api.http");

/** A route for each google.api.http binding of each routed method, most specific first. */
export function buildRoutes(router: Router): Route[] {
  const routes: Route[] = [];
  if (!httpRuleExtension) throw new Error("google.api.http is missing from the descriptor set");
  for (const method of router.methods.values()) {
    const desc = method.descriptor;
    const rule = getOption(desc, httpRuleExtension) as unknown as HttpRule | undefined;
    if (!rule?.pattern?.case) continue;
    for (const binding of [rule, ...(rule.additionalBindings ?? [])]) {
      const { case: verb, value } = binding.pattern;
      if (!verb) continue;
      const path = verb === "custom" ? (value as { path: string }).path : (value as string);
      const httpVerb = verb === "custom" ? (value as { kind: string }).kind.toUpperCase() : verb.toUpperCase();
      routes.push({
        verb: httpVerb,
        template: parsePathTemplate(path),
        body: binding.body,
        responseField: responseFieldOf(desc.output, binding.responseBody, method.path),
        method,
        input: desc.input,
        output: desc.output,
      });
    }
  }
  // Most literal segments first; a template with a verb before one without.
  routes.sort(
    (a, b) => b.template.literalCount - a.template.literalCount || Number(!!b.template.verb) - Number(!!a.template.verb),
  );
  return routes;
}

/** The route for a verb and path, or "method-not-allowed" when only other verbs' routes match the path. */
export function matchRoute(routes: Route[], verb: string, path: string): Match | "method-not-allowed" | undefined {
  let pathMatched = false;
  for (const route of routes) {
    const variables = matchPathTemplate(route.template, path);
    if (!variables) continue;
    if (route.verb === verb) return { route, variables };
    pathMatched = true;
  }
  return pathMatched ? "method-not-allowed" : undefined;
}

/** The message field a binding's response_body names, checked once when the routes are built. */
function responseFieldOf(output: DescMessage, responseBody: string, path: string): Route["responseField"] {
  if (responseBody === "") return undefined;
  const field = output.fields.find((f) => f.name === responseBody);
  if (!field || field.fieldKind !== "message") throw new Error(`bad response_body in ${path}`);
  return field;
}
