import type { Plan } from "../platform/db/schema.js";

/** Output cap on the long side, per plan: what a plan buys. */
export const PLAN_MAX_LONG_SIDE: Record<Plan, number> = { free: 576, pro: 1080, business: 2160 };
export const PLANS = Object.keys(PLAN_MAX_LONG_SIDE) as Plan[];
