import type { Db } from "../platform/db/database.js";

/**
 * Where job transitions are announced (the webhook facility). `emit` writes inside the caller's
 * transaction, so an event exists exactly when its transition committed; `wake` after commit.
 */
export interface EventSink {
  emit(db: Db, accountId: string, event: string, data: Record<string, unknown>): Promise<void>;
  wake(): void;
}
