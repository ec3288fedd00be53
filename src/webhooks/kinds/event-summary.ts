import { EVENT_CATALOG } from "../events.js";

/** The event as every kind sees it: the generic body, parsed, and the delivery's id. */
export interface EventView {
  event: string;
  timestamp: string;
  data: Record<string, unknown>;
  delivery_id: string;
}

/** What a chat message says about an event: a title, one line, and the data as name/value pairs. */
export interface EventSummary {
  title: string;
  line: string;
  fields: { name: string; value: string }[];
}

type Data = Record<string, unknown>;

/** One readable line per catalog event; an event the catalog does not know gets its name and data. */
const LINES: Record<string, (d: Data) => string> = {
  "request.completed": (d) => {
    const head = d.status !== undefined ? `${model(d)} answered ${show(d.status)}` : `${model(d)} completed`;
    const details = [
      d.tokens_in !== undefined ? `${show(d.tokens_in)} tokens in` : "",
      d.tokens_out !== undefined ? `${show(d.tokens_out)} out` : "",
      d.cost_usd !== undefined ? `$${show(d.cost_usd)}` : "",
    ].filter((part) => part !== "");
    return details.length > 0 ? `${head}: ${details.join(", ")}` : head;
  },
  "request.failed": (d) => `${model(d)} failed${d.status !== undefined ? ` with ${show(d.status)}` : ""}${d.error ? `: ${show(d.error)}` : ""}`,
  "quota.exceeded": (d) =>
    `${d.quota ? `${show(d.quota)} quota` : "A quota"} exceeded${d.required !== undefined ? `: needs ${show(d.required)}, balance ${show(d.balance)}` : ""}`,
  "test.ping": (d) => show(d.message ?? "Test delivery"),
  "video.started": (d) => `${job(d)} started rendering`,
  "video.completed": (d) =>
    `${job(d)} completed: ${show(d.frames_rendered)} frames, ${show(d.credits_charged)} credits; its outputs are downloadable`,
  "video.errored": (d) => `${job(d)} failed${errorMessage(d)}; its credits were refunded`,
  "webhook.disabled": (d) =>
    `Webhook ${d.description ? `"${show(d.description)}" ` : ""}to ${show(d.host)} was disabled: ${
      d.reason === "gone" ? "its receiver answered 410 Gone" : `${show(d.failure_count)} failed deliveries in a row (last status ${show(d.last_status)})`
    }; enable it again once the receiver is fixed`,
};

export function summarize(view: EventView): EventSummary {
  const known = EVENT_CATALOG.find((e) => e.name === view.event);
  const title = known ? `${view.event}: ${known.description}` : view.event;
  const line = LINES[view.event]?.(view.data) ?? `${view.event} occurred`;
  const fields = Object.entries(view.data).map(([name, value]) => ({ name, value: show(value) }));
  return { title, line, fields };
}

/** Strings as they are, anything else as compact JSON; null as "none", absent values as "?". */
export function show(value: unknown): string {
  if (value === null) return "none";
  if (value === undefined) return "?";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** Cuts to at most `max` UTF-16 units, ending in an ellipsis, never inside a surrogate pair. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max - 1;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  return `${text.slice(0, end)}…`;
}

function model(d: Data): string {
  const name = [d.provider, d.model].filter((v) => v !== undefined && v !== "").map(show).join("/");
  return name === "" ? "A request" : name;
}

function job(d: Data): string {
  const kind = d.type === "FACE_DETECTION" ? "Face detection" : "Face swap";
  return d.name ? `${kind} "${show(d.name)}"` : `${kind} ${show(d.id)}`;
}

function errorMessage(d: Data): string {
  const error = d.error as { message?: unknown } | null | undefined;
  return error && typeof error === "object" && error.message ? `: ${show(error.message)}` : "";
}
