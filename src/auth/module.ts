import type { Platform } from "../platform/module.js";
import type { Capability } from "../transport/module.js";
import { accountService, adminService } from "./handlers.js";
import { AuthService } from "./service.js";

export interface AuthModule extends Capability {
  service: AuthService;
}

/** Accounts and API keys; start() creates the bootstrap admin key when the database has none. */
export function authModule({ config, db, notifications, logger }: Platform): AuthModule {
  const service = new AuthService(db, notifications, logger);
  return {
    service,
    services: [adminService(service), accountService(service)],
    start: () => service.bootstrap(config.adminToken),
  };
}
