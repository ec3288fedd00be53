import type { TestApp } from "./app.js";

/** Creates an account with one API key of the given scopes; returns the account id and key. */
export async function createAccountWithKey(
  t: TestApp,
  scopes: string[],
  options: { name?: string; groupIds?: string[]; expireTime?: Date } = {},
): Promise<{ accountId: string; key: string; keyId: string }> {
  const { account } = await t.admin.admin.createAccount({ name: options.name ?? "tester", groupIds: options.groupIds ?? [] });
  const created = await t.admin.admin.createApiKey({
    accountId: account!.id,
    name: "test key",
    scopes,
    expireTime: options.expireTime,
  });
  return { accountId: account!.id, key: created.key, keyId: created.apiKey!.id };
}
