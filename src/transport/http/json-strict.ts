import { ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Violations } from "../../platform/errors.js";
import { quoted } from "../request-decoder.js";
import { findField, isObject } from "./binding.js";

/**
 * What proto3 JSON refuses and protobuf-es's reader lets through, each named by its field: a
 * timestamp on a day its month lacks (the reader's Date.parse moves 2027-02-30 to March 2), an
 * integer or number written in hex, binary or octal ("0x50" read as 80), a duration with trailing
 * text or more than nine decimals, and a field mask naming what no field could be called. Throws
 * INVALID_ARGUMENT (INVALID_JSON) listing them. Messages with no such field anywhere in them (a
 * heartbeat's) are not walked at all.
 */
export function checkStrictJson(desc: DescMessage, json: JsonObject): void {
  if (!holdsChecked(desc)) return;
  const violations = new Violations();
  checkObject(desc, json, "", violations);
  violations.throwIfAny("INVALID_JSON");
}

const INTEGER_WRAPPERS = new Set(["Int32Value", "UInt32Value", "Int64Value", "UInt64Value"].map((name) => `google.protobuf.${name}`));
const NUMBER_WRAPPERS = new Set(["google.protobuf.DoubleValue", "google.protobuf.FloatValue"]);
/** Well-known types whose JSON strings are checked here (see checkMessage). */
const CHECKED_TYPES = new Set(["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask", ...INTEGER_WRAPPERS, ...NUMBER_WRAPPERS]);

/** Whether a message has, at any depth, a field whose JSON is checked; found once per message type. */
const checked = new WeakMap<DescMessage, boolean>();

function holdsChecked(desc: DescMessage): boolean {
  let known = checked.get(desc);
  if (known === undefined) {
    // Messages may hold themselves: while one is being looked at it counts as holding nothing.
    checked.set(desc, false);
    known = desc.fields.some(isChecked);
    checked.set(desc, known);
  }
  return known;
}

function isChecked(field: DescField): boolean {
  const message = field.fieldKind === "scalar" || field.fieldKind === "enum" ? undefined : field.message;
  if (message) return CHECKED_TYPES.has(message.typeName) || (!message.typeName.startsWith("google.protobuf.") && holdsChecked(message));
  return field.scalar !== undefined && isNumeric(field.scalar);
}

function isNumeric(scalar: ScalarType): boolean {
  return scalar !== ScalarType.STRING && scalar !== ScalarType.BOOL && scalar !== ScalarType.BYTES;
}

function checkObject(desc: DescMessage, json: JsonObject, prefix: string, violations: Violations): void {
  for (const [key, value] of Object.entries(json)) {
    const field = findField(desc, key);
    if (!field || !isChecked(field)) continue;
    const path = prefix ? `${prefix}.${field.name}` : field.name;
    switch (field.fieldKind) {
      case "scalar":
        checkScalar(field.scalar, value, path, violations);
        break;
      case "message":
        checkMessage(field.message, value, path, violations);
        break;
      case "list":
        if (Array.isArray(value)) value.forEach((item, i) => checkElement(field, item, `${path}[${i}]`, violations));
        break;
      case "map":
        if (isObject(value)) for (const [k, item] of Object.entries(value)) checkElement(field, item, `${path}[${quoted(k)}]`, violations);
        break;
    }
  }
}

function checkElement(field: DescField & { fieldKind: "list" | "map" }, value: JsonValue, path: string, violations: Violations): void {
  if (field.message) checkMessage(field.message, value, path, violations);
  else if (field.scalar !== undefined) checkScalar(field.scalar, value, path, violations);
}

function checkMessage(desc: DescMessage, value: JsonValue, path: string, violations: Violations): void {
  if (typeof value !== "string") {
    if (!desc.typeName.startsWith("google.protobuf.") && isObject(value)) checkObject(desc, value, path, violations);
    return;
  }
  if (desc.typeName === "google.protobuf.Timestamp") checkTimestamp(value, path, violations);
  else if (desc.typeName === "google.protobuf.Duration") {
    if (!DURATION.test(value)) violations.add(path, `must be a duration string such as "1.5s" (got ${quoted(value)})`);
  } else if (desc.typeName === "google.protobuf.FieldMask") checkFieldMask(value, path, violations);
  else if (INTEGER_WRAPPERS.has(desc.typeName)) checkScalar(ScalarType.INT64, value, path, violations);
  else if (NUMBER_WRAPPERS.has(desc.typeName)) checkScalar(ScalarType.DOUBLE, value, path, violations);
}

/** Seconds with at most nine decimals, then `s`, nothing more: the reader also took "1.5sec". */
const DURATION = /^-?[0-9]+(?:\.[0-9]{1,9})?s$/;
/** A decimal number, as proto3 JSON writes an integer in a string (exponents included: "1e3"). */
const DECIMAL = /^-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;
/** Besides decimals, what proto3 JSON writes for a float or double that is not a finite number. */
const NOT_FINITE = new Set(["NaN", "Infinity", "-Infinity"]);

function checkScalar(scalar: ScalarType, value: JsonValue, path: string, violations: Violations): void {
  if (typeof value !== "string" || !isNumeric(scalar)) return;
  if (scalar === ScalarType.DOUBLE || scalar === ScalarType.FLOAT) {
    if (!DECIMAL.test(value) && !NOT_FINITE.has(value)) violations.add(path, `must be a number, in decimal digits (got ${quoted(value)})`);
  } else if (!DECIMAL.test(value)) {
    violations.add(path, `must be an integer, in decimal digits (got ${quoted(value)})`);
  }
}

/** A path's field names, lowerCamel by now (see fieldMaskJson): the reader would turn "Comment" into "_comment". */
const MASK_PART = /^[a-z][a-zA-Z0-9]*$/;

function checkFieldMask(value: string, path: string, violations: Violations): void {
  if (value === "") return;
  const bad = value.split(",").find((mask) => !mask.split(".").every((part) => MASK_PART.test(part)));
  if (bad !== undefined) violations.add(path, `must list field names such as "comment" or "service_export_to", separated by commas (got ${quoted(bad)})`);
}

const RFC3339 = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T/;
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];

function checkTimestamp(value: string, path: string, violations: Violations): void {
  const match = RFC3339.exec(value);
  if (!match) return;
  const year = Number(match[1]), month = Number(match[2]), day = Number(match[3]);
  if (month < 1 || month > 12 || day < 1) return;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]!;
  if (day > days) violations.add(path, `is not a real date: ${MONTHS[month - 1]} ${year} has ${days} days (got ${quoted(value)})`);
}
