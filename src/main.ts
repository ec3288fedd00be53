import { startApp } from "./app.js";
import { ConfigError, loadConfig } from "./config.js";
import { createLogger } from "./platform/logger.js";
import { openDatabase } from "./platform/module.js";

/** `node dist/src/main.js` serves; `node dist/src/main.js migrate` only applies migrations. */
async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createLogger(config.logLevel);

  if (process.argv[2] === "migrate") {
    const database = await openDatabase(config, logger, 1);
    await database.stop();
    return;
  }

  const app = await startApp(config, logger);
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      logger.warn({ event: "forced_exit", signal }, "second signal: exiting now");
      process.exit(1);
    }
    logger.info({ event: "signal", signal }, "shutting down");
    app.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ event: "shutdown_failed", err: error }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
}

main().catch((error: unknown) => {
  process.stderr.write(`${JSON.stringify({ level: "fatal", event: "start_failed", message: String(error) })}\n`);
  process.exit(1);
});
