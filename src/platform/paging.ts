/** offset/limit paging: limit 0 means the default, and a larger limit is coerced to the maximum (AIP-158). */
export function pageOf(
  request: { offset: number; limit: number },
  { defaultLimit, maxLimit }: { defaultLimit: number; maxLimit: number },
): { offset: number; limit: number } {
  const limit = request.limit === 0 ? defaultLimit : Math.min(request.limit, maxLimit);
  return { offset: request.offset, limit };
}
