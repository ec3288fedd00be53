import type { Namespace } from "../../gen/v1/namespace.js";
import type { Violations } from "../platform/errors.js";
import { canonicalId } from "../platform/ids.js";

/** A namespace token: 128 random bits as lowercase hex. API keys never take this shape. */
const NAMESPACE_TOKEN = /^[0-9a-f]{32}$/;

export function isNamespaceToken(token: string): boolean {
  return NAMESPACE_TOKEN.test(token);
}

export const NAME_PATTERN = /^[0-9A-Za-z\-./:_]+$/;
export const MAX_NAME = 64;
export const MAX_COMMENT = 1024;
export const MAX_OWNERS = 1024;
export const MAX_METADATA_ENTRIES = 64;
export const MAX_METADATA_KEY = 128;
export const MAX_METADATA_VALUE = 4096;
export const MAX_EXPORT_TO = 1000;
export const MAX_PRINCIPALS = 100;
export const MAX_PRINCIPAL_ID = 128;

/** Fields UpdateNamespace may change, by proto name. */
export const UPDATABLE_FIELDS = [
  "comment",
  "owners",
  "service_export_to",
  "metadata",
  "sync_to_global_registry",
  "user_ids",
  "group_ids",
  "remove_user_ids",
  "remove_group_ids",
] as const;
export type UpdatableField = (typeof UPDATABLE_FIELDS)[number];

export const IMMUTABLE_FIELDS = [
  "name",
  "id",
  "token",
  "ctime",
  "mtime",
  "total_service_count",
  "total_health_instance_count",
  "total_instance_count",
  "editable",
  "deleteable",
];

export function checkName(violations: Violations, field: string, name: string | undefined): void {
  if (name === undefined || name === "") violations.add(field, "is required");
  else if (name.length > MAX_NAME) violations.add(field, `must be at most ${MAX_NAME} characters`);
  else if (!NAME_PATTERN.test(name)) violations.add(field, "may contain only letters, digits and - . / : _");
  // "." and ".." would be path segments a URL client folds away (/v1/namespaces/.. is /v1/).
  else if (name === "." || name === "..") violations.add(field, `"${name}" is reserved`);
}

/** Metadata of namespaces and instances: at most 64 entries, keys 1..128, values up to 4096 characters. */
export function checkMetadata(violations: Violations, field: string, metadata: Record<string, string>): void {
  const entries = Object.entries(metadata);
  if (entries.length > MAX_METADATA_ENTRIES) violations.add(field, `at most ${MAX_METADATA_ENTRIES} entries`);
  for (const [key, value] of entries) {
    if (key === "" || key.length > MAX_METADATA_KEY) {
      violations.add(`${field}[${JSON.stringify(key)}]`, `keys must be 1..${MAX_METADATA_KEY} characters`);
    } else if (value.length > MAX_METADATA_VALUE) {
      violations.add(`${field}[${JSON.stringify(key)}]`, `values must be at most ${MAX_METADATA_VALUE} characters`);
    }
  }
}

/** Checks the writable fields of `ns` that `fields` selects; `prefix` is the path of `ns` in the request. */
export function checkWritableFields(
  violations: Violations,
  prefix: string,
  ns: Namespace,
  fields: ReadonlySet<UpdatableField>,
): void {
  const at = (field: string) => `${prefix}.${field}`;
  if (fields.has("comment") && (ns.comment?.length ?? 0) > MAX_COMMENT) {
    violations.add(at("comment"), `must be at most ${MAX_COMMENT} characters`);
  }
  if (fields.has("owners") && (ns.owners?.length ?? 0) > MAX_OWNERS) {
    violations.add(at("owners"), `must be at most ${MAX_OWNERS} characters`);
  }
  if (fields.has("service_export_to")) {
    if (ns.serviceExportTo.length > MAX_EXPORT_TO) {
      violations.add(at("service_export_to"), `at most ${MAX_EXPORT_TO} namespaces`);
    }
    ns.serviceExportTo.forEach((target, i) => {
      if (target !== "*") checkName(violations, `${at("service_export_to")}[${i}]`, target);
    });
  }
  if (fields.has("metadata")) checkMetadata(violations, at("metadata"), ns.metadata);
  const principals: [UpdatableField, string[]][] = [
    ["user_ids", ns.userIds],
    ["group_ids", ns.groupIds],
    ["remove_user_ids", ns.removeUserIds],
    ["remove_group_ids", ns.removeGroupIds],
  ];
  for (const [field, ids] of principals) {
    if (!fields.has(field)) continue;
    if (ids.length > MAX_PRINCIPALS) violations.add(at(field), `at most ${MAX_PRINCIPALS} ids`);
    ids.forEach((id, i) => {
      if (id.trim() === "" || id.length > MAX_PRINCIPAL_ID) {
        violations.add(`${at(field)}[${i}]`, `must be 1..${MAX_PRINCIPAL_ID} characters`);
      }
    });
  }
  for (const [add, remove] of [
    ["user_ids", "remove_user_ids"],
    ["group_ids", "remove_group_ids"],
  ] as const) {
    if (!fields.has(add) || !fields.has(remove)) continue;
    const removing = new Set(remove === "remove_user_ids" ? ns.removeUserIds : ns.removeGroupIds);
    const both = (add === "user_ids" ? ns.userIds : ns.groupIds).filter((id) => removing.has(id));
    if (both.length > 0) violations.add(at(remove), `ids both granted and removed: ${both.join(", ")}`);
  }
}

/** The fields a request sets when it sends no update_mask: every field that is present. */
export function presentFields(ns: Namespace): Set<UpdatableField> {
  const fields = new Set<UpdatableField>();
  if (ns.comment !== undefined) fields.add("comment");
  if (ns.owners !== undefined) fields.add("owners");
  if (ns.serviceExportTo.length > 0) fields.add("service_export_to");
  if (Object.keys(ns.metadata).length > 0) fields.add("metadata");
  if (ns.syncToGlobalRegistry) fields.add("sync_to_global_registry");
  if (ns.userIds.length > 0) fields.add("user_ids");
  if (ns.groupIds.length > 0) fields.add("group_ids");
  if (ns.removeUserIds.length > 0) fields.add("remove_user_ids");
  if (ns.removeGroupIds.length > 0) fields.add("remove_group_ids");
  return fields;
}

/** Matches `x` exactly, `x*` as a prefix, `*x` as a suffix and `*x*` as a substring. */
export function wildcardMatcher(pattern: string): (value: string) => boolean {
  const starts = pattern.startsWith("*");
  const ends = pattern.length > 1 && pattern.endsWith("*");
  const core = pattern.slice(starts ? 1 : 0, ends ? -1 : undefined);
  if (pattern === "*") return () => true;
  if (starts && ends) return (v) => v.includes(core);
  if (starts) return (v) => v.endsWith(core);
  if (ends) return (v) => v.startsWith(core);
  return (v) => v === pattern;
}

/** The entries of an owners list; account ids among them as the database writes them (see canonicalId). */
export function ownersOf(owners: string): string[] {
  return owners
    .split(",")
    .map((o) => canonicalId(o.trim()))
    .filter((o) => o !== "");
}
