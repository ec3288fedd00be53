import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { freePort } from "../../src/platform/free-port.js";
import { processCpu } from "./proc-stat.js";

export interface ServerProcess {
  /** The server's stdout (its JSON log), kept for inspection. */
  logFile: string;
  grpcAddress: string;
  httpUrl: string;
  pid: number;
  /** Resident set size now and at its peak, in MiB (from /proc). */
  memory(): { rssMiB: number; peakMiB: number };
  /** CPU time (user + system) the server has used so far, in milliseconds (from /proc). */
  cpuMs(): number;
  stop(): Promise<void>;
}

/**
 * Runs the built service (dist/src/main.js) as its own process, as `make run` would. Its log goes
 * to a file, not through this process, which must spend its CPU on generating load.
 */
export async function startServerProcess(env: Record<string, string>, logFile: string): Promise<ServerProcess> {
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const main = path.resolve(import.meta.dirname, "../../src/main.js");
  const log = fs.openSync(logFile, "w");
  const child: ChildProcess = spawn(process.execPath, [main], {
    env: { ...process.env, ...env, GRPC_PORT: String(grpcPort), HTTP_PORT: String(httpPort), HOST: "127.0.0.1" },
    stdio: ["ignore", log, "inherit"],
  });
  fs.closeSync(log);
  let exited: number | null | undefined;
  child.once("exit", (code) => (exited = code));
  while (!fs.readFileSync(logFile, "utf8").includes('"event":"started"')) {
    if (exited !== undefined) throw new Error(`server exited with ${exited} before starting; see ${logFile}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const status = () => fs.readFileSync(`/proc/${child.pid}/status`, "utf8");
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status())?.[1] ?? NaN);
  return {
    logFile,
    grpcAddress: `127.0.0.1:${grpcPort}`,
    httpUrl: `http://127.0.0.1:${httpPort}`,
    pid: child.pid!,
    memory: () => ({ rssMiB: kib("VmRSS") / 1024, peakMiB: kib("VmHWM") / 1024 }),
    cpuMs: () => processCpu(child.pid!)?.ownMs ?? NaN,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}
