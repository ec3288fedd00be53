import { clip, summarize, type EventView } from "./event-summary.js";

// Block Kit's limits: header text 150, section text 3000, section fields 10 of 2000 each; Slack
// truncates a top-level text past 40,000 characters and advises staying under 4000.
const HEADER_MAX = 150;
const SECTION_MAX = 3000;
const FIELDS_MAX = 10;
const FIELD_MAX = 2000;
const TEXT_MAX = 4000;

/** An incoming-webhook message: `text` (notifications, fallback) plus header, section and context blocks. */
export function slackMessage(view: EventView): object {
  const summary = summarize(view);
  const shown = summary.fields.slice(0, FIELDS_MAX);
  const more = summary.fields.length - shown.length;
  const blocks: object[] = [
    { type: "header", text: { type: "plain_text", text: clip(summary.title, HEADER_MAX), emoji: false } },
    { type: "section", text: { type: "mrkdwn", text: clip(escape(summary.line), SECTION_MAX) } },
  ];
  if (shown.length > 0) {
    blocks.push({
      type: "section",
      fields: shown.map((f) => ({ type: "mrkdwn", text: clip(`*${escape(f.name)}*\n${escape(f.value)}`, FIELD_MAX) })),
    });
  }
  const context = `${view.event} at ${view.timestamp}${more > 0 ? `; ${more} more field(s) not shown` : ""}`;
  blocks.push({ type: "context", elements: [{ type: "mrkdwn", text: clip(escape(context), SECTION_MAX) }] });
  // The top-level text is mrkdwn too, and it is what notifications show.
  return { text: clip(escape(`${summary.title}: ${summary.line}`), TEXT_MAX), blocks };
}

/** Slack's mrkdwn reads &, < and > as markup (links, mentions); event data must stay text. */
function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
