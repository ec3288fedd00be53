import type { Violations } from "../../platform/errors.js";
import { clip, summarize, type EventView } from "./event-summary.js";

/** sendMessage's limit on text, after entity parsing (plain text here, so the characters sent). */
const TEXT_MAX = 4096;
/** A chat's numeric id, or a public channel's @username. */
const CHAT_ID = /^(-?\d{1,16}|@[A-Za-z][A-Za-z0-9_]{4,31})$/;
/** Telegram's chat ids have at most 52 significant bits: a JSON number carries them exactly. */
const CHAT_ID_MAX = 2 ** 52;

export function checkTelegramSettings(violations: Violations, settings: Record<string, string>): void {
  const chatId = settings.chat_id ?? "";
  if (chatId === "") violations.add("settings.chat_id", "is required for kind telegram (the chat to post to)");
  else if (!CHAT_ID.test(chatId)) violations.add("settings.chat_id", "must be a numeric chat id or a channel's @username");
  else if (!chatId.startsWith("@") && (Number(chatId) === 0 || Math.abs(Number(chatId)) >= CHAT_ID_MAX)) {
    violations.add("settings.chat_id", "a numeric chat id is not 0, and has at most 52 bits (up to 4503599627370495 either way)");
  }
}

/**
 * The Bot API's sendMessage parameters, posted to the webhook's URL
 * (https://api.telegram.org/bot<token>/sendMessage). Plain text, so event data needs no escaping.
 */
export function telegramMessage(view: EventView, settings: Record<string, string>): object {
  const summary = summarize(view);
  const lines = [summary.title, summary.line, "", ...summary.fields.map((f) => `${f.name}: ${f.value}`)];
  const chatId = settings.chat_id!;
  return {
    chat_id: chatId.startsWith("@") ? chatId : Number(chatId),
    text: clip(lines.join("\n").trimEnd(), TEXT_MAX),
    link_preview_options: { is_disabled: true },
  };
}
