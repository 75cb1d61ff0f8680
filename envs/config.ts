// Validation helpers for env configs: every bad key or value is reported with its name and
// what is allowed, before any env is built.
import { EnvConfigError } from "./types.ts";

type Check = (field: string, value: unknown) => unknown;

/** Overlay `overrides` on `defaults`, checking each key with its check; unknown keys are errors. */
export function overlayConfig<C extends object>(
  envType: string,
  defaults: C,
  overrides: Record<string, unknown>,
  checks: { [K in keyof C]: Check },
): C {
  const result: Record<string, unknown> = { ...(defaults as Record<string, unknown>) };
  for (const [key, value] of Object.entries(overrides)) {
    const check = (checks as Record<string, Check>)[key];
    if (!check) {
      const allowed = Object.keys(checks).join(", ");
      throw new EnvConfigError(key, `unknown ${envType} config key; allowed: ${allowed}`);
    }
    result[key] = check(key, value);
  }
  return result as C;
}

export function integerIn(min: number, max: number): Check {
  return (field, value) => {
    if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
      throw new EnvConfigError(field, `${JSON.stringify(value)} is not an integer in [${min}, ${max}]`);
    }
    return value;
  };
}

export function numberIn(min: number, max: number): Check {
  return (field, value) => {
    if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
      throw new EnvConfigError(field, `${JSON.stringify(value)} is not a number in [${min}, ${max}]`);
    }
    return value;
  };
}

export function oneOf(...allowed: readonly (string | boolean)[]): Check {
  return (field, value) => {
    if (!allowed.includes(value as string | boolean)) {
      throw new EnvConfigError(field, `${JSON.stringify(value)} is not one of ${allowed.join(", ")}`);
    }
    return value;
  };
}

/** A map from the given keys (all required) to non-empty strings, e.g. grid_lookup or action_lookup. */
export function stringMap(keys: readonly string[] | null): Check {
  return (field, value) => {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new EnvConfigError(field, "must be a mapping of keys to strings");
    }
    const entries = Object.entries(value as Record<string, unknown>);
    for (const [k, v] of entries) {
      if (typeof v !== "string" || v.length === 0) {
        throw new EnvConfigError(`${field}.${k}`, `${JSON.stringify(v)} is not a non-empty string`);
      }
    }
    if (keys) {
      const given = entries.map(([k]) => k).sort();
      const want = [...keys].sort();
      if (given.join(",") !== want.join(",")) {
        throw new EnvConfigError(field, `keys must be exactly ${want.join(", ")} (got ${given.join(", ")})`);
      }
    }
    return { ...(value as Record<string, string>) };
  };
}

export function pairOf(check: Check): Check {
  return (field, value) => {
    if (!Array.isArray(value) || value.length !== 2) {
      throw new EnvConfigError(field, `${JSON.stringify(value)} is not a pair [rows, cols]`);
    }
    return [check(`${field}[0]`, value[0]), check(`${field}[1]`, value[1])];
  };
}

export const anything: Check = (_field, value) => value;
