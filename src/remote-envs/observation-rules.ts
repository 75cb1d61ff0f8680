// How a remote OpenEnv observation becomes what rollgym reads: the prompt's text (one field, or
// a template over several) and the step's success (a field, or "done with a positive reward").
// OpenEnv envs name their fields as they like and many send no `info`, so both are configurable.
import { EnvConfigError } from "../../envs/types.ts";
import { isPlainObject } from "../../protocol/plain-object.ts";

const FIELD = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;

/** A field path (`score`, `info.solved`) read from an observation, or absent. */
function read(observation: Record<string, unknown>, path: readonly string[]): { value: unknown } | null {
  let at: unknown = observation;
  for (const key of path) {
    // Below a null (an Optional field OpenEnv sent as None) every field is null too.
    if (at === null) return { value: null };
    if (!isPlainObject(at) || !Object.hasOwn(at, key)) return null;
    at = (at as Record<string, unknown>)[key];
  }
  return { value: at };
}

/** A template's pieces: literal text, or a field path to fill in. */
export type TemplatePart = string | { field: string; path: string[] };

/**
 * Parses `observation_template`: text with `{field}` (or `{field.sub}`) placeholders over the
 * observation's fields; `{{` and `}}` stand for literal braces. At least one placeholder.
 */
export function parseTemplate(key: string, value: unknown): TemplatePart[] | null {
  if (value === null) return null;
  if (typeof value !== "string")
    throw new EnvConfigError(
      key,
      `${JSON.stringify(value)} is not a template (text with {field} placeholders)`,
    );
  const parts: TemplatePart[] = [];
  let text = "";
  for (let i = 0; i < value.length; i++) {
    const c = value[i];
    if ((c === "{" || c === "}") && value[i + 1] === c) {
      text += c;
      i++;
    } else if (c === "{") {
      const end = value.indexOf("}", i);
      const field = end < 0 ? "" : value.slice(i + 1, end);
      if (!FIELD.test(field))
        throw new EnvConfigError(
          key,
          `${JSON.stringify(value.slice(i, end < 0 ? undefined : end + 1))} at character ${i} is not a placeholder: write {field} or {field.sub} (letters, digits, _), and {{ or }} for a literal brace`,
        );
      if (text) parts.push(text);
      text = "";
      parts.push({ field, path: field.split(".") });
      i = end;
    } else if (c === "}")
      throw new EnvConfigError(key, `a lone "}" at character ${i}; write }} for a literal brace`);
    else text += c;
  }
  if (text) parts.push(text);
  if (!parts.some((p) => typeof p !== "string"))
    throw new EnvConfigError(
      key,
      `${JSON.stringify(value)} names no field: write {field} where a field's value goes`,
    );
  return parts;
}

/**
 * Fills the template from an observation: text as it is, null as nothing, other values as JSON.
 * Returns the text, or the placeholder the observation lacks.
 */
export function renderTemplate(
  parts: readonly TemplatePart[],
  observation: Record<string, unknown>,
): { text: string } | { missing: string } {
  let text = "";
  for (const part of parts) {
    if (typeof part === "string") {
      text += part;
      continue;
    }
    const found = read(observation, part.path);
    if (found === null) return { missing: part.field };
    const { value } = found;
    text += typeof value === "string" ? value : value === null ? "" : JSON.stringify(value);
  }
  return { text };
}

/**
 * When a step counts as a success (RAGEN's info.success, which success and pass@k read):
 * - `auto` (the default): the step's `info.success` when its info has a boolean one, else `done_positive`;
 * - `done_positive`: the step ends the episode (not truncated) with a reward above 0;
 * - `info.NAME` / `observation.NAME`: that field is true or a number above 0.
 */
export type SuccessRule = { kind: "auto" } | { kind: "done_positive" } | { kind: "field"; path: string[] };

export const SUCCESS_RULES = "auto, done_positive, info.NAME or observation.NAME";

export function parseSuccessRule(key: string, value: unknown): SuccessRule {
  if (value === "auto" || value === "done_positive") return { kind: value };
  if (typeof value === "string" && FIELD.test(value)) {
    const [root, ...rest] = value.split(".");
    if ((root === "info" || root === "observation") && rest.length > 0)
      return { kind: "field", path: root === "info" ? ["info", ...rest] : rest };
  }
  throw new EnvConfigError(key, `${JSON.stringify(value)} is not a success rule; allowed: ${SUCCESS_RULES}`);
}

/** The step's outcome as the server sent it. */
export interface StepOutcome {
  observation: Record<string, unknown>;
  reward: number;
  done: boolean;
  truncated: boolean;
}

export function stepSucceeded(rule: SuccessRule, step: StepOutcome): boolean {
  const donePositive = step.done && !step.truncated && step.reward > 0;
  switch (rule.kind) {
    case "done_positive":
      return donePositive;
    case "auto": {
      const info = step.observation.info;
      return isPlainObject(info) && typeof info.success === "boolean" ? info.success : donePositive;
    }
    case "field": {
      const value = read(step.observation, rule.path)?.value;
      return value === true || (typeof value === "number" && value > 0);
    }
  }
}
