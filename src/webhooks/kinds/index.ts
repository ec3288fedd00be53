import type { WebhookKind } from "../../platform/db/schema.js";
import { oneOf, type Violations } from "../../platform/errors.js";
import type { ClaimedDelivery } from "../repository.js";
import { checkTemplate, renderTemplate } from "./custom-template.js";
import { discordMessage } from "./discord.js";
import type { EventView } from "./event-summary.js";
import { magicHourHeaders, magicHourMessage } from "./magic-hour.js";
import { slackMessage } from "./slack.js";
import { checkTelegramSettings, telegramMessage } from "./telegram.js";

/** The settings each kind takes; any other key is refused. */
const SETTINGS: Record<WebhookKind, readonly string[]> = {
  generic: [],
  slack: [],
  discord: [],
  telegram: ["chat_id"],
  "magic-hour": [],
  custom: ["template"],
};

/**
 * Checks a kind and its settings together, naming `kind` or `settings.<key>`; returns the kind when
 * it is one.
 */
export function checkKind(violations: Violations, kind: string, settings: Record<string, string>): WebhookKind | undefined {
  const known = oneOf(violations, "kind", kind, SETTINGS);
  if (known === undefined) return undefined;
  const allowed = SETTINGS[known];
  for (const key of Object.keys(settings)) {
    if (!allowed.includes(key)) {
      violations.add(`settings.${key}`, allowed.length > 0 ? `kind ${known} takes only ${allowed.join(", ")}` : `kind ${known} takes no settings`);
    }
  }
  if (known === "telegram") checkTelegramSettings(violations, settings);
  if (known === "custom") checkTemplate(violations, settings.template);
  return known;
}

export interface KindPayload {
  body: string;
  /** Headers the kind adds to the delivery's own. */
  headers: Record<string, string>;
}

/**
 * The body a receiver of this kind gets for an event. The generic kind sends the stored body
 * untouched (byte for byte what was published); the others reshape its parsed form.
 */
export function renderKind(delivery: Pick<ClaimedDelivery, "id" | "body" | "kind" | "settings" | "secret">, sentAt: Date): KindPayload {
  if (delivery.kind === "generic") return { body: delivery.body, headers: {} };
  const parsed = JSON.parse(delivery.body) as Omit<EventView, "delivery_id">;
  const view: EventView = { ...parsed, data: parsed.data ?? {}, delivery_id: delivery.id };
  switch (delivery.kind) {
    case "slack":
      return { body: JSON.stringify(slackMessage(view)), headers: {} };
    case "discord":
      return { body: JSON.stringify(discordMessage(view)), headers: {} };
    case "telegram":
      return { body: JSON.stringify(telegramMessage(view, delivery.settings)), headers: {} };
    case "magic-hour": {
      const body = JSON.stringify(magicHourMessage(view));
      return { body, headers: magicHourHeaders(delivery.secret, body, sentAt) };
    }
    case "custom":
      return { body: JSON.stringify(renderTemplate(delivery.settings.template!, view)), headers: {} };
  }
}
