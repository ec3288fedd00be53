/**
 * Every LISTEN/NOTIFY channel the replicas use, so that a channel's writers and listeners name it
 * from one place. Notifications sends and delivers them; what each payload holds is said here.
 */

/** The name of a namespace whose record or registry counts changed; caches drop it. */
export const NAMESPACES_CHANNEL = "namespaces";

/** The hash of an API key that was revoked or changed; caches drop it. */
export const API_KEYS_CHANNEL = "api_keys";

/** "queued" when a job waits for a worker; "cancel:<job id>" to stop a running job at once. */
export const JOBS_CHANNEL = "faceswap_jobs";

/** Deliveries are due (empty payload); dispatchers look at the queue. */
export const WEBHOOK_DELIVERIES_CHANNEL = "webhook_deliveries";

/** Comma-separated ids of notices a replica has delivered; used by Notifications itself. */
export const ACK_CHANNEL = "atrium_ack";

/** The newest registry revision a replica committed; change feeds read the changes up to it. */
export const REGISTRY_CHANNEL = "registry_changes";

/** Newline-separated names of namespaces whose instances a heartbeat batch renewed; instance caches drop them. */
export const HEARTBEATS_CHANNEL = "registry_heartbeats";
