import type { Db } from "../platform/db/database.js";
import type { JobStatus, JobType } from "../platform/db/schema.js";
import type { Metrics } from "../platform/metrics.js";
import * as repo from "./repository.js";

const OPEN_STATUSES = ["queued", "rendering"] as const;

/** The face swap metrics: jobs finished and frames rendered by this replica, open jobs of all replicas. */
export class JobMetrics {
  private readonly finishedJobs;
  private readonly frames;

  constructor(metrics: Metrics, db: Db) {
    this.finishedJobs = metrics.counter("atrium_faceswap_jobs_finished_total", "Jobs finished, by type and final status.", [
      "type",
      "status",
    ]);
    this.frames = metrics.counter("atrium_faceswap_frames_rendered_total", "Frames of completed face swap renders.");
    metrics.collected("atrium_faceswap_jobs", "Open jobs of all replicas, by status.", "gauge", ["status"], async () => {
      const counts = new Map((await repo.countOpenJobs(db)).map((r) => [r.status, r.count]));
      // Both statuses always, so an empty queue reads 0 rather than vanishing.
      return OPEN_STATUSES.map((status) => ({ labels: { status }, value: counts.get(status) ?? 0 }));
    });
  }

  finished(type: JobType, status: Extract<JobStatus, "complete" | "error" | "canceled">, frames = 0): void {
    this.finishedJobs.inc({ type, status });
    if (frames > 0) this.frames.inc({}, frames);
  }
}
