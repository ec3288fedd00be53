import { clip, summarize, type EventView } from "./event-summary.js";

// Discord's limits: content 2000; per embed title 256, description 4096, 25 fields (name 256,
// value 1024), footer 2048, and 6000 characters across all of an embed's text.
const CONTENT_MAX = 2000;
const TITLE_MAX = 256;
const DESCRIPTION_MAX = 4096;
const FIELDS_MAX = 25;
const FIELD_NAME_MAX = 256;
const FIELD_VALUE_MAX = 1024;
const FOOTER_MAX = 2048;
const EMBED_TOTAL_MAX = 6000;
/** Discord refuses a field whose name or value is empty or blank; a zero-width space stands in. */
const BLANK = "\u200b";
const COLORS: Record<string, number> = { completed: 0x1f883d, ping: 0x0969da, failed: 0xcf222e, errored: 0xcf222e, exceeded: 0xbf8700 };

/** A webhook message: `content` plus one embed; mentions in event data never ping anyone. */
export function discordMessage(view: EventView): object {
  const summary = summarize(view);
  const title = clip(summary.title, TITLE_MAX);
  const footer = clip(view.event, FOOTER_MAX);
  const description = clip(summary.line, Math.min(DESCRIPTION_MAX, EMBED_TOTAL_MAX - title.length - footer.length));
  let budget = EMBED_TOTAL_MAX - title.length - description.length - footer.length;
  const fields: { name: string; value: string; inline: boolean }[] = [];
  for (const f of summary.fields.slice(0, FIELDS_MAX)) {
    const name = clip(f.name.trim() === "" ? BLANK : f.name, FIELD_NAME_MAX);
    const value = clip(f.value.trim() === "" ? BLANK : f.value, FIELD_VALUE_MAX);
    if (name.length + value.length > budget) break;
    budget -= name.length + value.length;
    fields.push({ name, value, inline: value.length <= 40 });
  }
  const verb = view.event.split(".").pop() ?? "";
  return {
    content: clip(`**${summary.title}**`, CONTENT_MAX),
    embeds: [
      {
        title,
        description,
        color: COLORS[verb] ?? 0x8c959f,
        fields,
        footer: { text: footer },
        timestamp: view.timestamp,
      },
    ],
    allowed_mentions: { parse: [] },
  };
}
