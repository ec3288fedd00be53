import type { Db } from "../../src/platform/db/database.js";

/**
 * Runs `work` in a transaction that is then rolled back: the app's dispatchers never see its rows,
 * so nothing but `work` can claim a delivery it inserts.
 */
export async function rolledBack<T>(db: Db, work: (tx: Db) => Promise<T>): Promise<T> {
  const rollback = new Error("rollback");
  let result: T | undefined;
  await db
    .transaction()
    .execute(async (tx) => {
      result = await work(tx);
      throw rollback;
    })
    .catch((error: unknown) => {
      if (error !== rollback) throw error;
    });
  return result!;
}

/** A transaction on a connection of its own, kept open until `commit`, as another replica's would be. */
export async function heldOpen<T>(db: Db, work: (tx: Db) => Promise<T>): Promise<{ result: T; commit: () => Promise<void> }> {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let started!: (result: T) => void;
  let failed!: (error: unknown) => void;
  const result = new Promise<T>((resolve, reject) => ((started = resolve), (failed = reject)));
  const done = db.transaction().execute(async (tx) => {
    started(await work(tx));
    await gate;
  });
  done.catch(failed);
  const value = await result;
  return {
    result: value,
    commit: async () => {
      release();
      await done;
    },
  };
}
