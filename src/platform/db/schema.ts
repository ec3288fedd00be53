import type { ColumnType, Generated, Insertable, Selectable } from "kysely";
import type { MediaInfo } from "../media/ffmpeg.js";

/** Timestamps are read as Date and written as Date or left to their default. */
type Timestamp = ColumnType<Date, Date | undefined, Date>;
type NullableTimestamp = ColumnType<Date | null, Date | null | undefined, Date | null>;

export interface AccountsTable {
  id: Generated<string>;
  name: string;
  group_ids: ColumnType<string[], string[] | undefined, string[]>;
  created_at: Timestamp;
  plan: ColumnType<Plan, Plan | undefined, Plan>;
  credit_balance: ColumnType<number, number | undefined, number>;
}

export type Plan = "free" | "pro" | "business";

export interface ApiKeysTable {
  id: Generated<string>;
  account_id: string;
  name: string;
  scopes: string[];
  /** The first characters of the key, to recognise it in lists. */
  prefix: string;
  /** SHA-256 of the key, hex; the key itself is never stored. */
  key_hash: string;
  created_at: Timestamp;
  expires_at: NullableTimestamp;
  revoked_at: NullableTimestamp;
}

export interface NamespacesTable {
  id: Generated<string>;
  name: string;
  comment: string | null;
  owners: string;
  token: string;
  service_export_to: ColumnType<string[], string[] | undefined, string[]>;
  metadata: ColumnType<Record<string, string>, string | undefined, string>;
  sync_to_global_registry: ColumnType<boolean, boolean | undefined, boolean>;
  created_by: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

/** Principals granted edit and delete rights on a namespace (Namespace.user_ids / group_ids). */
export interface NamespaceGrantsTable {
  namespace_id: string;
  principal_kind: "user" | "group";
  principal_id: string;
}

export type NamespaceAction = "CREATED" | "UPDATED" | "DELETED" | "TOKEN_ROTATED";

/** One changed field of a namespace; a token is named without values. */
export interface NamespaceFieldChange {
  field: string;
  before?: unknown;
  after?: unknown;
}

export interface NamespaceHistoryTable {
  /** bigserial, read as a number (safe for 2^53 entries). */
  id: Generated<number>;
  namespace_id: string;
  namespace_name: string;
  action: NamespaceAction;
  /** The API key's id, or "namespace token". */
  actor: string;
  account_id: string;
  changes: ColumnType<NamespaceFieldChange[], string, string>;
  created_at: Timestamp;
}

export interface ServicesTable {
  id: Generated<string>;
  namespace_id: string;
  name: string;
  created_at: Timestamp;
}

export interface InstancesTable {
  id: Generated<string>;
  service_id: string;
  host: string;
  port: number;
  healthy: ColumnType<boolean, boolean | undefined, boolean>;
  isolate: ColumnType<boolean, boolean | undefined, boolean>;
  weight: ColumnType<number, number | undefined, number>;
  metadata: ColumnType<Record<string, string>, string | undefined, string>;
  ttl_seconds: ColumnType<number, number | undefined, number>;
  last_heartbeat_at: Timestamp;
  /** last_heartbeat_at + ttl_seconds: when the instance turns unhealthy without a heartbeat. */
  expires_at: Timestamp;
  created_at: Timestamp;
}

/** The single row that hands out registry revisions (see the registry_changes migration). */
export interface RegistryRevisionTable {
  id: ColumnType<boolean, boolean | undefined, never>;
  revision: ColumnType<number, number | undefined, number>;
  pruned_through: ColumnType<number, number | undefined, number>;
}

/** What happened to an instance, as WatchInstances reports it. */
export type InstanceChangeKind = "registered" | "deregistered" | "expired" | "revived" | "updated" | "isolation_changed";

/**
 * One change to one instance, or the deletion of a service that had no instance (which no instance
 * change would show), kept for a while so watchers can resume from a revision.
 */
export interface RegistryChangesTable {
  revision: number;
  namespace: string;
  service: string;
  kind: InstanceChangeKind | "service_deleted";
  /** to_jsonb of the instances row (timestamps as ISO strings); {} for a service deleted. */
  instance: ColumnType<Record<string, unknown>, string, string>;
  created_at: Timestamp;
}

export interface WebhooksTable {
  id: Generated<string>;
  account_id: string;
  url: string;
  events: string[];
  secret: string;
  enabled: ColumnType<boolean, boolean | undefined, boolean>;
  description: ColumnType<string, string | undefined, string>;
  created_at: Timestamp;
  last_triggered_at: NullableTimestamp;
  last_status: number | null;
  failure_count: ColumnType<number, number | undefined, number>;
  kind: ColumnType<WebhookKind, WebhookKind | undefined, WebhookKind>;
  /** What the kind needs: telegram's chat_id, custom's template. */
  settings: ColumnType<Record<string, string>, string | undefined, string>;
  signature_scheme: ColumnType<SignatureScheme, SignatureScheme | undefined, SignatureScheme>;
  /** The secret the last rotation replaced; it signs too until previous_secret_expires_at. */
  previous_secret: string | null;
  previous_secret_expires_at: NullableTimestamp;
  retry_schedule: ColumnType<RetrySchedule, RetrySchedule | undefined, RetrySchedule>;
  /** Why the webhook is disabled; null while enabled. */
  disabled_reason: ColumnType<DisabledReason | null, DisabledReason | null | undefined, DisabledReason | null>;
  /** Since when it is disabled; null while enabled. */
  disabled_at: NullableTimestamp;
}

/** The payload format: generic (the default), slack, discord, telegram, magic-hour or custom. */
export type WebhookKind = "generic" | "slack" | "discord" | "telegram" | "magic-hour" | "custom";
/** seed (X-Webhook-Signature, the default) or standard-webhooks. */
export type SignatureScheme = "seed" | "standard-webhooks";
/** seed (1 s, 2 s, 4 s, the default) or extended (about a day). */
export type RetrySchedule = "seed" | "extended";

/** failures: 10 failed deliveries in a row; gone: the receiver answered 410 Gone; manual: a person turned it off. */
export type DisabledReason = "failures" | "gone" | "manual";

export interface WebhookEventsTable {
  id: Generated<string>;
  account_id: string;
  name: string;
  /** The exact JSON body sent (and signed) for every delivery of the event. */
  body: string;
  occurred_at: Date;
}

/** A PublishEvent idempotency key and the event that claimed it; it lives 24 hours. */
export interface WebhookPublishKeysTable {
  account_id: string;
  key: string;
  event_id: string;
  created_at: Timestamp;
}

export type DeliveryState = "pending" | "delivered" | "failed" | "skipped";

export interface WebhookDeliveriesTable {
  id: Generated<string>;
  event_id: string;
  webhook_id: string;
  state: ColumnType<DeliveryState, DeliveryState | undefined, DeliveryState>;
  /** Attempts started so far (a claim starts one). */
  attempts: ColumnType<number, number | undefined, number>;
  /** False for a test delivery, which is tried once. */
  retries: ColumnType<boolean, boolean | undefined, boolean>;
  next_attempt_at: Timestamp;
  locked_until: NullableTimestamp;
  created_at: Timestamp;
}

export interface WebhookAttemptsTable {
  id: Generated<string>;
  delivery_id: string;
  webhook_id: string;
  attempt: number;
  status: number;
  success: boolean;
  latency_ms: number;
  error: ColumnType<string, string | undefined, string>;
  response_body: ColumnType<string, string | undefined, string>;
  next_attempt_at: NullableTimestamp;
  created_at: Timestamp;
}

export type JobType = "FACE_SWAP" | "FACE_DETECTION";
export type JobStatus = "queued" | "rendering" | "complete" | "error" | "canceled";

export type FaceSwapMode = "all-faces" | "individual-faces";
export type StyleVersion = "v1" | "v2";

/** The validated inputs of a job; a source is a blob key (`api-assets/...`) or an http(s) URL. */
export interface JobSpec {
  video?: string;
  mode?: FaceSwapMode;
  face?: string;
  mappings?: { originalFace: string; newFace: string }[];
  style?: StyleVersion;
  /** Face detection: the video or image, and the confidence threshold. */
  target?: string;
  confidence?: number;
}

export interface FaceswapJobsTable {
  id: Generated<string>;
  account_id: string;
  type: JobType;
  name: string;
  status: ColumnType<JobStatus, JobStatus | undefined, JobStatus>;
  spec: ColumnType<JobSpec, string, string>;
  start_seconds: ColumnType<number, number | undefined, number>;
  end_seconds: ColumnType<number, number | undefined, number>;
  width: ColumnType<number, number | undefined, number>;
  height: ColumnType<number, number | undefined, number>;
  fps: ColumnType<number, number | undefined, number>;
  has_audio: ColumnType<boolean, boolean | undefined, boolean>;
  frames_total: ColumnType<number, number | undefined, number>;
  frames_rendered: ColumnType<number, number | undefined, number>;
  credits_reserved: ColumnType<number, number | undefined, number>;
  credits_charged: ColumnType<number, number | undefined, number>;
  error_code: ColumnType<string | null, string | null | undefined, string | null>;
  error_message: ColumnType<string | null, string | null | undefined, string | null>;
  enabled: ColumnType<boolean, boolean | undefined, boolean>;
  attempts: ColumnType<number, number | undefined, number>;
  locked_by: ColumnType<string | null, string | null | undefined, string | null>;
  locked_until: NullableTimestamp;
  output_keys: ColumnType<string[], string[] | undefined, string[]>;
  created_at: Timestamp;
  started_at: NullableTimestamp;
  finished_at: NullableTimestamp;
}

export interface CreditLedgerTable {
  id: Generated<string>;
  account_id: string;
  job_id: string | null;
  kind: "grant" | "reserve" | "settle";
  amount: number;
  reason: ColumnType<string, string | undefined, string>;
  created_at: Timestamp;
}

export interface MediaProbesTable {
  key: string;
  size: number;
  media: ColumnType<MediaInfo | null, string | null, string | null>;
  problem: string | null;
  probed_at: Timestamp;
}

export interface ServiceSecretsTable {
  name: string;
  value: string;
}

export interface Database {
  accounts: AccountsTable;
  api_keys: ApiKeysTable;
  namespaces: NamespacesTable;
  namespace_grants: NamespaceGrantsTable;
  namespace_history: NamespaceHistoryTable;
  services: ServicesTable;
  instances: InstancesTable;
  registry_revision: RegistryRevisionTable;
  registry_changes: RegistryChangesTable;
  webhooks: WebhooksTable;
  webhook_events: WebhookEventsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  webhook_attempts: WebhookAttemptsTable;
  webhook_publish_keys: WebhookPublishKeysTable;
  faceswap_jobs: FaceswapJobsTable;
  credit_ledger: CreditLedgerTable;
  service_secrets: ServiceSecretsTable;
  media_probes: MediaProbesTable;
}

export type AccountRow = Selectable<AccountsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type NamespaceRow = Selectable<NamespacesTable>;
export type NewNamespaceRow = Insertable<NamespacesTable>;
export type NamespaceHistoryRow = Selectable<NamespaceHistoryTable>;
export type ServiceRow = Selectable<ServicesTable>;
export type InstanceRow = Selectable<InstancesTable>;
export type RegistryChangeRow = Selectable<RegistryChangesTable>;
export type WebhookRow = Selectable<WebhooksTable>;
export type WebhookAttemptRow = Selectable<WebhookAttemptsTable>;
export type JobRow = Selectable<FaceswapJobsTable>;
