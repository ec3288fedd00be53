/**
 * The dashboard's HTML. Everything is inline and runs under a per-response CSP nonce; every value
 * from the API goes into the page through textContent or attributes set in code, never as HTML.
 */
export function dashboardPage(options: {
  nonce: string;
  events: readonly { name: string; description: string }[];
  loginError: string;
}): string {
  const { nonce } = options;
  // JSON inside <script>: "<" is escaped so no value can close the script element.
  const boot = JSON.stringify({ events: options.events, loginError: options.loginError }).replace(/</g, "\\u003c");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Webhooks</title>
<style nonce="${nonce}">
  :root { font-family: system-ui, sans-serif; color: #1f2328; background: #f6f8fa; }
  body { margin: 0; }
  header { display: flex; justify-content: space-between; align-items: center; padding: 12px 24px; background: #24292f; color: #fff; }
  header h1 { font-size: 18px; margin: 0; }
  main { max-width: 1100px; margin: 24px auto; padding: 0 16px; }
  section { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 16px; margin-bottom: 16px; }
  h2 { font-size: 16px; margin: 0 0 12px; }
  label { display: block; font-size: 13px; margin: 8px 0 4px; font-weight: 600; }
  input[type=text], input[type=url], input[type=password], select, textarea { width: 100%; box-sizing: border-box; padding: 6px 8px; border: 1px solid #d0d7de; border-radius: 6px; }
  .events { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 4px 16px; font-size: 13px; }
  .events label { font-weight: normal; margin: 0; }
  button { padding: 5px 12px; border: 1px solid #d0d7de; border-radius: 6px; background: #f6f8fa; cursor: pointer; font-size: 13px; }
  button.primary { background: #1f883d; color: #fff; border-color: #1f883d; }
  button.danger { color: #cf222e; }
  table { width: 100%; border-collapse: collapse; font-size: 13px; }
  th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid #eaeef2; vertical-align: top; }
  td.actions button { margin: 0 4px 4px 0; }
  .dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 6px; }
  .active { background: #1f883d; } .inactive { background: #8c959f; } .errored { background: #cf222e; }
  .disabled-why { margin-top: 2px; }
  .error { color: #cf222e; } .ok { color: #1f883d; } .muted { color: #656d76; }
  form.inline { display: flex; gap: 8px; align-items: center; margin-bottom: 12px; font-size: 13px; }
  form.inline label { margin: 0; font-weight: normal; }
  form.inline input { width: auto; }
  textarea { font-family: ui-monospace, monospace; min-height: 70px; }
  .kind { white-space: nowrap; font-size: 12px; border: 1px solid #d0d7de; border-radius: 10px; padding: 0 6px; margin-left: 6px; }
  .secret { font-family: ui-monospace, monospace; background: #fff8c5; padding: 8px; border-radius: 6px; word-break: break-all; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<header><h1>Webhooks</h1><form method="post" action="/dashboard/webhooks/logout" id="logout" hidden><button type="submit">Log out</button></form></header>
<main>
  <section id="login" hidden>
    <h2>Log in</h2>
    <form method="post" action="/dashboard/webhooks/login">
      <label for="token">API key (with the webhooks scope)</label>
      <input type="password" id="token" name="token" autocomplete="current-password" required>
      <p class="error" id="login-error"></p>
      <button class="primary" type="submit">Log in</button>
    </form>
  </section>
  <div id="app" hidden>
    <section>
      <h2 id="form-title">New webhook</h2>
      <form id="webhook-form">
        <label for="url">Receiver URL</label>
        <input type="url" id="url" required placeholder="https://example.com/hooks">
        <label for="description">Description</label>
        <input type="text" id="description" maxlength="1000">
        <label>Events</label>
        <div class="events" id="event-picker"></div>
        <label for="custom-events">Other events (comma-separated)</label>
        <input type="text" id="custom-events" placeholder="billing.invoice_paid">
        <label for="kind">Payload format</label>
        <select id="kind">
          <option value="generic">Generic JSON (the event as is)</option>
          <option value="slack">Slack (incoming webhook: text and blocks)</option>
          <option value="discord">Discord (webhook: content and an embed)</option>
          <option value="telegram">Telegram (Bot API sendMessage)</option>
          <option value="magic-hour">Magic Hour (its webhook body and signature)</option>
          <option value="custom">Custom template</option>
        </select>
        <div id="kind-telegram" hidden>
          <label for="chat-id">Telegram chat id (the URL is https://api.telegram.org/bot&lt;token&gt;/sendMessage)</label>
          <input type="text" id="chat-id" placeholder="-1001234567890 or @channel_name">
        </div>
        <div id="kind-custom" hidden>
          <label for="template">Template: JSON whose strings may use {{event}}, {{timestamp}}, {{delivery_id}}, {{data.field}}</label>
          <textarea id="template" spellcheck="false" placeholder='{"msg": "{{event}} for {{data.trace_id}}"}'></textarea>
        </div>
        <label for="scheme">Signature scheme</label>
        <select id="scheme">
          <option value="seed">X-Webhook-Signature (sha256= hex HMAC of the body)</option>
          <option value="standard-webhooks">Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature)</option>
        </select>
        <label for="retry-schedule">Retries</label>
        <select id="retry-schedule">
          <option value="seed">3 retries after 1 s, 2 s and 4 s</option>
          <option value="extended">Extended: 7 retries over about a day (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h)</option>
        </select>
        <label for="secret">Secret (leave empty to generate one; a new secret leaves the old one signing for 24 hours)</label>
        <input type="text" id="secret" minlength="16" maxlength="500" autocomplete="off">
        <p class="error" id="form-error"></p>
        <button class="primary" type="submit" id="save">Create webhook</button>
        <button type="button" id="cancel-edit" hidden>Cancel</button>
      </form>
      <p id="created-secret" hidden>Signing secret (shown in full only now and on the detail view): <span class="secret" id="created-secret-value"></span></p>
    </section>
    <section>
      <h2>Your webhooks</h2>
      <p class="error" id="list-error"></p>
      <table>
        <thead><tr><th>Status</th><th>URL</th><th>Events</th><th>Failures</th><th>Last status</th><th>Last triggered</th><th></th></tr></thead>
        <tbody id="webhooks"></tbody>
      </table>
      <p class="muted" id="empty">No webhooks yet.</p>
    </section>
    <section id="deliveries-section" hidden>
      <h2 id="deliveries-title">Recent deliveries</h2>
      <form id="recover-form" class="inline">
        <label for="recover-since">Send again every delivery that failed since</label>
        <input type="datetime-local" id="recover-since" required>
        <button type="submit" id="recover">Recover</button>
        <span id="recover-result"></span>
      </form>
      <table>
        <thead><tr><th>Time</th><th>Event</th><th>Attempt</th><th>Status</th><th>Result</th><th>Latency</th><th>Error</th><th></th></tr></thead>
        <tbody id="deliveries"></tbody>
      </table>
    </section>
  </div>
</main>
<script nonce="${nonce}">
const boot = ${boot};
const $ = (id) => document.getElementById(id);
let editing = null;
/** The last test result of each webhook, kept across re-renders of the list. */
const testResults = new Map();

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = response.status === 204 ? {} : await response.json().catch(() => ({}));
  if (response.status === 401) { showLogin(""); throw new Error("Your session has ended; log in again."); }
  if (!response.ok) throw new Error(data.message || ("HTTP " + response.status));
  return data;
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function showLogin(message) {
  $("app").hidden = true; $("logout").hidden = true; $("login").hidden = false;
  $("login-error").textContent = message;
}

function renderPicker(selected) {
  const picker = $("event-picker");
  picker.replaceChildren();
  const all = ["*", ...boot.events.map((e) => e.name)];
  for (const name of all) {
    const box = el("input", { type: "checkbox", value: name, checked: selected.includes(name), name: "event" });
    const description = name === "*" ? "All events" : boot.events.find((e) => e.name === name).description;
    picker.append(el("label", { title: description }, box, " " + name));
  }
  $("custom-events").value = selected.filter((name) => !all.includes(name)).join(", ");
}

function selectedEvents() {
  const picked = [...document.querySelectorAll("#event-picker input:checked")].map((box) => box.value);
  const custom = $("custom-events").value.split(",").map((s) => s.trim()).filter(Boolean);
  return [...picked, ...custom];
}

function showKindSettings() {
  $("kind-telegram").hidden = $("kind").value !== "telegram";
  $("kind-custom").hidden = $("kind").value !== "custom";
}

function kindFields() {
  const kind = $("kind").value;
  if (kind === "telegram") return { kind, settings: { chat_id: $("chat-id").value.trim() } };
  if (kind === "custom") return { kind, settings: { template: $("template").value } };
  return { kind };
}

function resetForm() {
  editing = null;
  $("form-title").textContent = "New webhook";
  $("save").textContent = "Create webhook";
  $("cancel-edit").hidden = true;
  $("url").value = ""; $("description").value = ""; $("secret").value = ""; $("form-error").textContent = "";
  $("kind").value = "generic"; $("chat-id").value = ""; $("template").value = ""; $("scheme").value = "seed"; $("retry-schedule").value = "seed";
  showKindSettings();
  renderPicker(["*"]);
}

function startEdit(webhook) {
  editing = webhook.id;
  $("form-title").textContent = "Edit webhook";
  $("save").textContent = "Save changes";
  $("cancel-edit").hidden = false;
  $("url").value = webhook.url; $("description").value = webhook.description; $("secret").value = "";
  $("scheme").value = webhook.signature_scheme; $("retry-schedule").value = webhook.retry_schedule;
  $("kind").value = webhook.kind; $("chat-id").value = webhook.settings.chat_id || ""; $("template").value = webhook.settings.template || "";
  showKindSettings();
  renderPicker(webhook.events);
  $("url").focus();
}

/** The webhooks listed; undefined when they could not be read. */
async function load() {
  try {
    const { webhooks } = await api("GET", "/api/webhooks");
    $("login").hidden = true; $("app").hidden = false; $("logout").hidden = false;
    $("list-error").textContent = "";
    render(webhooks);
    return webhooks;
  } catch (error) {
    if ($("app").hidden) showLogin(boot.loginError); else $("list-error").textContent = error.message;
  }
}

/**
 * The list and the delivery history shown read again: deliveries finish, retry and disable webhooks
 * while the page is open, and a status left as it was when the page loaded (errored after a resend
 * succeeded) tells the person watching the wrong thing.
 */
let refreshing = null;
function refresh() {
  refreshing ??= (async () => {
    const webhooks = await load();
    const shown = shownWebhook && webhooks?.find((webhook) => webhook.id === shownWebhook.id);
    if (shown) await showDeliveries(shown).catch(() => {});
    else if (webhooks && shownWebhook) { shownWebhook = null; $("deliveries-section").hidden = true; }
  })().finally(() => { refreshing = null; });
  return refreshing;
}
const REFRESH_MS = 5000;
setInterval(() => { if (!document.hidden && !$("app").hidden) refresh(); }, REFRESH_MS);

const DISABLED_REASONS = {
  failures: "Disabled automatically after 10 failed deliveries in a row",
  gone: "Disabled automatically: the receiver answered 410 Gone",
  manual: "Disabled by hand",
};

/** Why and since when a disabled webhook is off, for whoever has to turn it back on. */
function disabledWhy(webhook) {
  const why = DISABLED_REASONS[webhook.disabled_reason] || "Disabled";
  return webhook.disabled_at ? why + ", since " + new Date(webhook.disabled_at).toLocaleString() : why;
}

function render(webhooks) {
  const rows = webhooks.map((webhook) => {
    const shown = testResults.get(webhook.id);
    const result = el("div", { className: "test-result " + (shown ? shown.tone : ""), textContent: shown ? shown.text : "" });
    const test = el("button", { textContent: "Test", className: "test" });
    test.onclick = async () => {
      result.textContent = "Sending…"; result.className = "test-result muted";
      // Kept for re-renders of the list while the test is on its way.
      testResults.set(webhook.id, { text: "Sending…", tone: "muted" });
      try {
        const outcome = await api("POST", "/api/webhooks/" + webhook.id + "/test", {});
        testResults.set(webhook.id, outcome.delivered
          ? { text: "Test delivered (" + outcome.status + ")", tone: "ok" }
          : { text: "Test failed: " + (outcome.error || "status " + outcome.status), tone: "error" });
      } catch (error) { testResults.set(webhook.id, { text: error.message, tone: "error" }); }
      await load();
      await showDeliveries(webhook);
    };
    const toggle = el("button", { textContent: webhook.enabled ? "Disable" : "Enable", className: "toggle" });
    toggle.onclick = async () => { await api("PUT", "/api/webhooks/" + webhook.id, { enabled: !webhook.enabled }); await load(); };
    const edit = el("button", { textContent: "Edit", className: "edit" });
    edit.onclick = () => startEdit(webhook);
    const history = el("button", { textContent: "Deliveries", className: "history" });
    history.onclick = () => showDeliveries(webhook);
    const remove = el("button", { textContent: "Delete", className: "danger" });
    remove.onclick = async () => { if (confirm("Delete this webhook and its history?")) { await api("DELETE", "/api/webhooks/" + webhook.id); await refresh(); } };
    const row = el("tr", {},
      el("td", {}, el("span", { className: "dot " + webhook.status }), el("span", { className: "status", textContent: webhook.status })),
      el("td", {}, el("div", {}, el("span", { textContent: webhook.url, className: "url" }), el("span", { textContent: webhook.kind, className: "kind" }),
          webhook.signature_scheme === "seed" ? "" : el("span", { textContent: webhook.signature_scheme, className: "kind scheme" }),
          webhook.retry_schedule === "seed" ? "" : el("span", { textContent: webhook.retry_schedule + " retries", className: "kind schedule" })),
        webhook.enabled ? "" : el("div", { className: "disabled-why" + (webhook.disabled_reason === "manual" ? " muted" : " error"), textContent: disabledWhy(webhook) }),
        webhook.previous_secret_expires_at
          ? el("div", { className: "muted rotation", textContent: "previous secret signs until " + new Date(webhook.previous_secret_expires_at).toLocaleString() })
          : "",
        el("div", { className: "muted", textContent: webhook.description })),
      el("td", { textContent: webhook.events.join(", ") }),
      el("td", { textContent: webhook.failure_count }),
      el("td", { textContent: webhook.last_triggered_at ? webhook.last_status : "—" }),
      el("td", { textContent: webhook.last_triggered_at ? new Date(webhook.last_triggered_at).toLocaleString() : "never" }),
      el("td", { className: "actions" }, test, toggle, edit, history, remove, result));
    row.dataset.id = webhook.id;
    return row;
  });
  $("webhooks").replaceChildren(...rows);
  $("empty").hidden = webhooks.length > 0;
}

/** The delivery history shown, so resend and recover can refresh it. */
let shownWebhook = null;
/** Counts reads of a history: one that answers after a later one began is dropped, not shown. */
let historyReads = 0;
/** Why resending a delivery failed, kept across re-reads of the history until a resend succeeds. */
const resendErrors = new Map();

function localInputValue(date) {
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 16);
}

function resendButton(webhook, d) {
  const button = el("button", { textContent: resendErrors.get(d.delivery_id) || "Resend", className: "resend", title: "Send this event again as a new delivery" });
  button.onclick = async () => {
    button.disabled = true;
    try {
      await api("POST", "/api/webhooks/" + webhook.id + "/deliveries/" + d.delivery_id + "/resend", {});
      resendErrors.delete(d.delivery_id);
      button.textContent = "Queued";
      setTimeout(refresh, 1000);
    } catch (error) {
      resendErrors.set(d.delivery_id, error.message);
      button.textContent = error.message;
      button.disabled = false;
    }
  };
  return button;
}

async function showDeliveries(webhook) {
  if (shownWebhook?.id !== webhook.id) {
    $("recover-since").value = localInputValue(new Date(Date.now() - 24 * 3600 * 1000));
    $("recover-result").textContent = "";
  }
  shownWebhook = webhook;
  const read = ++historyReads;
  const { deliveries } = await api("GET", "/api/webhooks/" + webhook.id + "/deliveries?limit=20");
  if (read !== historyReads) return;
  $("deliveries-title").textContent = "Recent deliveries of " + webhook.url;
  $("deliveries").replaceChildren(...deliveries.map((d) => el("tr", {},
    el("td", { textContent: new Date(d.created_at).toLocaleString() }),
    el("td", { textContent: d.event }),
    el("td", { textContent: d.attempt }),
    el("td", { textContent: d.status }),
    el("td", { textContent: d.success ? "success" : (d.next_attempt_at ? "will retry" : "failed"), className: d.success ? "ok" : "error" }),
    el("td", { textContent: d.latency_ms + " ms" }),
    el("td", { textContent: d.error }),
    el("td", {}, resendButton(webhook, d)))));
  $("deliveries-section").hidden = false;
}

$("recover-form").onsubmit = async (event) => {
  event.preventDefault();
  const webhook = shownWebhook;
  $("recover-result").className = "muted";
  try {
    const since = new Date($("recover-since").value).toISOString();
    const { requeued } = await api("POST", "/api/webhooks/" + webhook.id + "/recover", { since });
    $("recover-result").textContent = (requeued || 0) + " deliveries queued again";
    setTimeout(refresh, 1000);
  } catch (error) { $("recover-result").className = "error"; $("recover-result").textContent = error.message; }
};

$("webhook-form").onsubmit = async (event) => {
  event.preventDefault();
  $("form-error").textContent = "";
  const body = { url: $("url").value.trim(), description: $("description").value, events: selectedEvents(), ...kindFields(), signature_scheme: $("scheme").value, retry_schedule: $("retry-schedule").value };
  if ($("secret").value) body.secret = $("secret").value;
  try {
    if (editing) {
      await api("PUT", "/api/webhooks/" + editing, body);
      $("created-secret").hidden = true;
    } else {
      const created = await api("POST", "/api/webhooks", body);
      $("created-secret-value").textContent = created.secret;
      $("created-secret").hidden = false;
    }
    resetForm();
    await load();
  } catch (error) { $("form-error").textContent = error.message; }
};
$("cancel-edit").onclick = resetForm;
$("kind").onchange = showKindSettings;

resetForm();
if (boot.loginError) showLogin(boot.loginError); else load();
</script>
</body>
</html>
`;
}
