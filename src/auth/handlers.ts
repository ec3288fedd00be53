import type { Account } from "../../gen/auth/v1/account.js";
import { AccountServiceService } from "../../gen/auth/v1/account_service.js";
import { AdminServiceService, type ApiKey } from "../../gen/auth/v1/admin_service.js";
import type { ApiKeyRow } from "../platform/db/schema.js";
import { defineService } from "../transport/call.js";
import type { AccountView } from "./repository.js";
import type { AuthService } from "./service.js";

export function adminService(auth: AuthService) {
  return defineService(AdminServiceService, "admin", {
    createAccount: async (request) => ({ account: toAccount(await auth.createAccount(request.name, request.groupIds)) }),

    listAccounts: async (request) => {
      const { amount, rows } = await auth.listAccounts(request);
      return { amount, accounts: rows.map(toAccount) };
    },

    createApiKey: async (request) => {
      const { row, key } = await auth.createApiKey(request.accountId, request.name, request.scopes, request.expireTime);
      return { apiKey: toApiKey(row), key };
    },

    listApiKeys: async (request) => ({
      apiKeys: (await auth.listApiKeys(request.accountId || undefined)).map(toApiKey),
    }),

    revokeApiKey: async (request) => ({ apiKey: toApiKey(await auth.revokeApiKey(request.keyId)) }),

    setAccountPlan: async (request) => ({ account: toAccount(await auth.setPlan(request.accountId, request.plan)) }),

    grantCredits: async (request) => ({
      account: toAccount(await auth.grantCredits(request.accountId, request.amount, request.reason)),
    }),
  });
}

/** Any API key may read its own account (plan and credits). */
export function accountService(auth: AuthService) {
  return defineService(AccountServiceService, "authenticated", {
    getAccount: async (_request, ctx) => ({ account: toAccount(await auth.getAccount(ctx.principal.accountId)) }),
  });
}

function toAccount(row: AccountView): Account {
  return {
    id: row.id,
    name: row.name,
    groupIds: row.group_ids,
    createTime: row.created_at,
    plan: row.plan,
    creditBalance: row.credit_balance,
    creditsReserved: row.credits_reserved,
  };
}

function toApiKey(row: ApiKeyRow): ApiKey {
  return {
    id: row.id,
    accountId: row.account_id,
    name: row.name,
    scopes: row.scopes,
    prefix: row.prefix,
    createTime: row.created_at,
    expireTime: row.expires_at ?? undefined,
    revokeTime: row.revoked_at ?? undefined,
  };
}
