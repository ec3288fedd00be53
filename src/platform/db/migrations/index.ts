import type { Migration } from "kysely/migration";
import * as m20261120T230000 from "./2026-11-20T23-00-00_accounts_and_namespaces.js";
import * as m20261121T010000 from "./2026-11-21T01-00-00_registry_instances.js";
import * as m20261121T020000 from "./2026-11-21T02-00-00_webhooks.js";
import * as m20261121T030000 from "./2026-11-21T03-00-00_faceswap.js";
import * as m20261121T040000 from "./2026-11-21T04-00-00_media_probes.js";
import * as m20261121T050000 from "./2026-11-21T05-00-00_asset_retention.js";
import * as m20261123T100000 from "./2026-11-23T10-00-00_webhook_kinds.js";
import * as m20261123T110000 from "./2026-11-23T11-00-00_webhook_signing.js";
import * as m20261123T120000 from "./2026-11-23T12-00-00_webhook_retry_schedules.js";
import * as m20261123T130000 from "./2026-11-23T13-00-00_webhook_recover.js";
import * as m20261123T140000 from "./2026-11-23T14-00-00_webhook_429_failed.js";
import * as m20261123T150000 from "./2026-11-23T15-00-00_webhook_publish_keys.js";
import * as m20261123T153000 from "./2026-11-23T15-30-00_registry_changes.js";
import * as m20261123T160000 from "./2026-11-23T16-00-00_webhook_disabled_reason.js";
import * as m20261123T163000 from "./2026-11-23T16-30-00_namespace_history.js";
import * as m20261123T170000 from "./2026-11-23T17-00-00_webhook_queue_writes.js";
import * as m20261123T180000 from "./2026-11-23T18-00-00_webhook_retention.js";
import * as m20261123T190000 from "./2026-11-23T19-00-00_webhook_outcome_writes.js";
import * as m20261123T193000 from "./2026-11-23T19-30-00_webhook_deliveries_by_webhook.js";
import * as m20261123T193100 from "./2026-11-23T19-31-00_webhook_events_before_v7.js";
import * as m20261123T193200 from "./2026-11-23T19-32-00_webhook_value_checks.js";
import * as m20261123T200000 from "./2026-11-23T20-00-00_instances_heartbeat_hot.js";

/** Every migration, by name; names sort in the order they run. Forward-only: there is no down. */
export const migrations: Record<string, Migration> = {
  "2026-11-20T23-00-00_accounts_and_namespaces": m20261120T230000,
  "2026-11-21T01-00-00_registry_instances": m20261121T010000,
  "2026-11-21T02-00-00_webhooks": m20261121T020000,
  "2026-11-21T03-00-00_faceswap": m20261121T030000,
  "2026-11-21T04-00-00_media_probes": m20261121T040000,
  "2026-11-21T05-00-00_asset_retention": m20261121T050000,
  "2026-11-23T10-00-00_webhook_kinds": m20261123T100000,
  "2026-11-23T11-00-00_webhook_signing": m20261123T110000,
  "2026-11-23T12-00-00_webhook_retry_schedules": m20261123T120000,
  "2026-11-23T13-00-00_webhook_recover": m20261123T130000,
  "2026-11-23T14-00-00_webhook_429_failed": m20261123T140000,
  "2026-11-23T15-00-00_webhook_publish_keys": m20261123T150000,
  "2026-11-23T15-30-00_registry_changes": m20261123T153000,
  "2026-11-23T16-00-00_webhook_disabled_reason": m20261123T160000,
  "2026-11-23T16-30-00_namespace_history": m20261123T163000,
  "2026-11-23T17-00-00_webhook_queue_writes": m20261123T170000,
  "2026-11-23T18-00-00_webhook_retention": m20261123T180000,
  "2026-11-23T19-00-00_webhook_outcome_writes": m20261123T190000,
  "2026-11-23T19-30-00_webhook_deliveries_by_webhook": m20261123T193000,
  "2026-11-23T19-31-00_webhook_events_before_v7": m20261123T193100,
  "2026-11-23T19-32-00_webhook_value_checks": m20261123T193200,
  "2026-11-23T20-00-00_instances_heartbeat_hot": m20261123T200000,
};
