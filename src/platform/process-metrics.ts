import { monitorEventLoopDelay } from "node:perf_hooks";
import type { Metrics } from "./metrics.js";

/** Memory, CPU time and event loop delay of this process, read at scrape time. */
export function registerProcessMetrics(metrics: Metrics): void {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  metrics.collected("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge", [], () => [
    { labels: {}, value: process.memoryUsage.rss() },
  ]);
  metrics.collected("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter", [], () => {
    const { user, system } = process.cpuUsage();
    return [{ labels: {}, value: (user + system) / 1e6 }];
  });
  metrics.collected(
    "nodejs_eventloop_lag_seconds",
    "99th percentile of the event loop delay since the previous scrape, in seconds.",
    "gauge",
    [],
    () => {
      // A window per scrape: a stall shows in the next scrape instead of being diluted by the whole uptime.
      const p99 = delay.count > 0 ? delay.percentile(99) / 1e9 : 0;
      delay.reset();
      return [{ labels: {}, value: p99 }];
    },
  );
}
