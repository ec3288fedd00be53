import { createHmac, timingSafeEqual } from "node:crypto";
import type { Received, Reply } from "./receiver.js";

/**
 * Receivers that accept what the real services accept and answer as they answer: Slack's incoming
 * webhooks, Discord's webhook execute, Telegram's sendMessage, and a Magic Hour webhook handler.
 * Each lists what the real service would refuse; a refusal is the service's own 400.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

export function slackProblems(m: Json): string[] {
  const p: string[] = [];
  if (typeof m.text !== "string" && !Array.isArray(m.blocks)) p.push("no_text");
  if (typeof m.text === "string" && m.text.length > 40_000) p.push("text too long");
  // The top-level text is mrkdwn as well: a raw < there is a link or an @channel.
  if (typeof m.text === "string" && /<|&(?!amp;|lt;|gt;)/.test(m.text)) p.push("text: unescaped control character");
  const blocks: Json[] = m.blocks ?? [];
  if (blocks.length > 50) p.push("more than 50 blocks");
  blocks.forEach((b, i) => {
    const at = `blocks[${i}]`;
    const textObject = (t: Json, max: number, where: string, kinds = ["plain_text", "mrkdwn"]) => {
      if (!t || !kinds.includes(t.type) || typeof t.text !== "string" || t.text.length === 0) p.push(`${where}: not a text object`);
      else if (t.text.length > max) p.push(`${where}: longer than ${max}`);
      else if (t.type === "mrkdwn" && /<|&(?!amp;|lt;|gt;)/.test(t.text)) p.push(`${where}: unescaped control character`);
    };
    if (b.type === "header") textObject(b.text, 150, `${at}.text`, ["plain_text"]);
    else if (b.type === "section") {
      if (!b.text && !b.fields) p.push(`${at}: section needs text or fields`);
      if (b.text) textObject(b.text, 3000, `${at}.text`);
      if (b.fields) {
        if (b.fields.length > 10) p.push(`${at}.fields: more than 10`);
        b.fields.forEach((f: Json, j: number) => textObject(f, 2000, `${at}.fields[${j}]`));
      }
    } else if (b.type === "context") {
      if (!Array.isArray(b.elements) || b.elements.length === 0 || b.elements.length > 10) p.push(`${at}.elements: 1..10`);
      else b.elements.forEach((e: Json, j: number) => textObject(e, 3000, `${at}.elements[${j}]`));
    } else p.push(`${at}: unexpected block type ${b.type}`);
  });
  return p;
}

export function discordProblems(m: Json): string[] {
  const p: string[] = [];
  if (!m.content && !(m.embeds?.length > 0)) p.push("Cannot send an empty message");
  if (typeof m.content === "string" && m.content.length > 2000) p.push("content: longer than 2000");
  const embeds: Json[] = m.embeds ?? [];
  if (embeds.length > 10) p.push("embeds: more than 10");
  embeds.forEach((e, i) => {
    const at = `embeds[${i}]`;
    const max = (value: unknown, n: number, where: string) => {
      if (typeof value === "string" && value.length > n) p.push(`${at}.${where}: longer than ${n}`);
    };
    max(e.title, 256, "title");
    max(e.description, 4096, "description");
    max(e.footer?.text, 2048, "footer.text");
    const fields: Json[] = e.fields ?? [];
    if (fields.length > 25) p.push(`${at}.fields: more than 25`);
    fields.forEach((f, j) => {
      // Discord trims them: a blank name or value is an empty one.
      if (typeof f.name !== "string" || f.name.trim().length === 0) p.push(`${at}.fields[${j}].name: required`);
      if (typeof f.value !== "string" || f.value.trim().length === 0) p.push(`${at}.fields[${j}].value: required`);
      max(f.name, 256, `fields[${j}].name`);
      max(f.value, 1024, `fields[${j}].value`);
    });
    const total = [e.title, e.description, e.footer?.text, ...fields.flatMap((f) => [f.name, f.value])]
      .filter((s) => typeof s === "string")
      .reduce((n: number, s: string) => n + s.length, 0);
    if (total > 6000) p.push(`${at}: more than 6000 characters in total`);
    if (e.timestamp !== undefined && Number.isNaN(Date.parse(e.timestamp))) p.push(`${at}.timestamp: not ISO8601`);
    if (e.color !== undefined && !(Number.isInteger(e.color) && e.color >= 0 && e.color <= 0xffffff)) p.push(`${at}.color`);
  });
  return p;
}

export function telegramProblems(m: Json): string[] {
  const p: string[] = [];
  if (!(typeof m.chat_id === "string" || Number.isSafeInteger(m.chat_id))) p.push("Bad Request: chat_id is empty");
  if (typeof m.text !== "string" || m.text.trim() === "") p.push("Bad Request: message text is empty");
  else if (m.text.length > 4096) p.push("Bad Request: message is too long");
  return p;
}

export const slackReply = (problems: string[]): Reply =>
  problems.length === 0 ? { status: 200, body: "ok" } : { status: 400, body: "invalid_blocks" };
export const discordReply = (problems: string[]): Reply =>
  problems.length === 0
    ? 204
    : { status: 400, headers: { "content-type": "application/json" }, body: JSON.stringify({ code: 50035, message: "Invalid Form Body", errors: problems }) };
export const telegramReply = (problems: string[]): Reply =>
  problems.length === 0
    ? { status: 200, headers: { "content-type": "application/json" }, body: JSON.stringify({ ok: true, result: { message_id: 1 } }) }
    : { status: 400, headers: { "content-type": "application/json" }, body: JSON.stringify({ ok: false, error_code: 400, description: problems[0] }) };

/**
 * What Magic Hour's webhook handlers check: the hex HMAC-SHA256 of `<timestamp>.<raw body>`, in
 * constant time, with the timestamp (Unix seconds) within five minutes.
 */
export function magicHourProblems(secret: string, request: Received): string[] {
  const signature = request.headers["magic-hour-event-signature"];
  const timestamp = request.headers["magic-hour-event-timestamp"];
  if (typeof signature !== "string" || typeof timestamp !== "string") return ["missing signature headers"];
  if (!/^\d+$/.test(timestamp) || Math.abs(Date.now() / 1000 - Number(timestamp)) > 300) return ["stale timestamp"];
  const expected = Buffer.from(createHmac("sha256", secret).update(`${timestamp}.${request.rawBody}`).digest("hex"));
  const given = Buffer.from(signature);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return ["bad signature"];
  const body = request.body as Json;
  if (typeof body.type !== "string" || typeof body.payload !== "object") return ["not {type, payload}"];
  return [];
}
