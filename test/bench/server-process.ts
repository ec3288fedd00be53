import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import readline from "node:readline";

export interface ServerProcess {
  grpcAddress: string;
  httpUrl: string;
  pid: number;
  /** Resident set size now and at its peak, in MiB (from /proc). */
  memory(): { rssMiB: number; peakMiB: number };
  stop(): Promise<void>;
}

/** Runs the built service (dist/src/main.js) as its own process, as `make run` would. */
export async function startServerProcess(env: Record<string, string>): Promise<ServerProcess> {
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const main = path.resolve(import.meta.dirname, "../../src/main.js");
  const child: ChildProcess = spawn(process.execPath, [main], {
    env: { ...process.env, ...env, GRPC_PORT: String(grpcPort), HTTP_PORT: String(httpPort), HOST: "127.0.0.1" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      if (line.includes('"event":"started"')) resolve();
      if (line.includes('"level":"error"') || line.includes('"level":"fatal"')) process.stderr.write(line + "\n");
    });
    child.once("exit", (code) => reject(new Error(`server exited with ${code} before starting`)));
  });
  const status = () => fs.readFileSync(`/proc/${child.pid}/status`, "utf8");
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status())?.[1] ?? NaN);
  return {
    grpcAddress: `127.0.0.1:${grpcPort}`,
    httpUrl: `http://127.0.0.1:${httpPort}`,
    pid: child.pid!,
    memory: () => ({ rssMiB: kib("VmRSS") / 1024, peakMiB: kib("VmHWM") / 1024 }),
    stop: () =>
      new Promise<void>((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
