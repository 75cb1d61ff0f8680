// OpenEnv's messages (docs/openenv.md), declared once: what a client may send on /ws, what a
// server answers, and the action, observation and state models GET /schema shows. rollgym's
// OpenEnv server checks each incoming message with it, rollgym's OpenEnv client checks each
// remote answer with it, and the Python provider reads the JSON Schema generated from it
// (python/rollgym_envs/openenv_schema.json, by protocol/openenv-json.ts).
//
// A refusal lists pydantic-shaped entries (type, loc, msg, input) like OpenEnv's own. TypeBox
// decides whether a value fits; the entries are then written from the schema by fieldErrors,
// whose rules the Python provider follows too (_field_errors), so both name the field, the value
// and what is allowed in the same words: test/openenv/golden-transcript.json holds them equal.
import { type Static, type TSchema, Type } from "typebox";
import { Compile, type Validator } from "typebox/compile";
import { clip, PREVIEW_CHARS, preview } from "./bounded-json.ts";
import { isPlainObject } from "./plain-object.ts";
import { MAX_SEED } from "./settings.ts";

/** OpenEnv's WSErrorCode values (types.py). */
export const OPENENV_ERROR_CODES = [
  "INVALID_JSON",
  "UNKNOWN_TYPE",
  "VALIDATION_ERROR",
  "EXECUTION_ERROR",
  "CAPACITY_REACHED",
  "FACTORY_ERROR",
  "SESSION_ERROR",
] as const;
export type OpenEnvErrorCode = (typeof OPENENV_ERROR_CODES)[number];

/** OpenEnv's ResetRequest.episode_id bound. */
export const MAX_EPISODE_ID_CHARS = 255;
/** Entries a VALIDATION_ERROR lists at most: an object of 30,000 unknown keys gets a few, not 30,000. */
export const MAX_LISTED_ERRORS = 5;

const closed = { additionalProperties: false } as const;

// --- the models /schema shows --------------------------------------------------------------

/** rollgym's action model: `{"action": NAME}` plus OpenEnv's base `metadata`. */
export const ActionSchema = Type.Object(
  {
    action: Type.String({
      description:
        'an action name (a string, e.g. "Up", one of the observation\'s `actions` when it lists them)',
    }),
    metadata: Type.Optional(
      Type.Object({}, { description: "an object (ignored: OpenEnv's Action base field)" }),
    ),
  },
  { ...closed, title: "RollgymAction", description: 'an action object like {"action": "Up"}' },
);

export const ObservationSchema = Type.Object(
  {
    text: Type.String({ description: "The env's text observation (what `rollgym envs play` prints)." }),
    actions: Type.Union([Type.Array(Type.String()), Type.Null()], {
      description: "Action names of this episode; null for an env that takes free text.",
    }),
    truncated: Type.Optional(
      Type.Boolean({
        description:
          "The env's own step limit ran out (done is true too); sent by rollgym serve, not by the Python provider.",
      }),
    ),
    info: Type.Object(
      {},
      {
        description:
          "success, action_is_effective, action_is_valid and the env's other facts; {} after reset.",
      },
    ),
    reward: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
    done: Type.Optional(Type.Boolean()),
  },
  { title: "RollgymObservation" },
);

const Seed = Type.Integer({ minimum: 0, maximum: MAX_SEED });

export const StateSchema = Type.Object(
  {
    episode_id: Type.Union([Type.String(), Type.Null()]),
    step_count: Type.Integer({ minimum: 0 }),
    seed: Type.Union([Seed, Type.Null()]),
    done: Type.Boolean(),
    tag: Type.Optional(Type.String({ description: "rollgym serve: the tag played." })),
    max_actions_per_traj: Type.Optional(
      Type.Integer({
        description:
          "rollgym serve: the tag's action budget; rollgym's rollouts enforce it, this session does not.",
      }),
    ),
    env: Type.Optional(Type.String({ description: "The Python provider: the env's name." })),
  },
  { title: "RollgymState" },
);

/** GET /schema's answer: the same for every tag and every env, from rollgym serve and the Python provider. */
export const OPENENV_MODELS = { action: ActionSchema, observation: ObservationSchema, state: StateSchema };

// --- what a client sends ---------------------------------------------------------------------

/** OpenEnv's ResetRequest: reset's `data`, and POST /reset's body. */
export const ResetRequestSchema = Type.Object(
  {
    seed: Type.Optional(Type.Union([Seed, Type.Null()])),
    episode_id: Type.Optional(Type.Union([Type.String({ maxLength: MAX_EPISODE_ID_CHARS }), Type.Null()])),
  },
  { ...closed, description: "an object of reset parameters" },
);
export type ResetRequest = Static<typeof ResetRequestSchema>;

/** POST /step's body: OpenEnv's StepRequest (its timeout_s and request_id pass unread). */
export const StepRequestSchema = Type.Object({ action: ActionSchema });

export const OPENENV_CLIENT_MESSAGES = {
  reset: Type.Object(
    { type: Type.Literal("reset"), data: Type.Optional(Type.Union([ResetRequestSchema, Type.Null()])) },
    closed,
  ),
  step: Type.Object({ type: Type.Literal("step"), data: ActionSchema }, closed),
  state: Type.Object({ type: Type.Literal("state") }, closed),
  close: Type.Object({ type: Type.Literal("close") }, closed),
};
export type OpenEnvMessageType = keyof typeof OPENENV_CLIENT_MESSAGES;
export const OPENENV_MESSAGE_TYPES = Object.keys(OPENENV_CLIENT_MESSAGES) as OpenEnvMessageType[];
export type OpenEnvClientMessage = {
  [K in OpenEnvMessageType]: Static<(typeof OPENENV_CLIENT_MESSAGES)[K]>;
}[OpenEnvMessageType];

// --- what a server answers -------------------------------------------------------------------

/** One entry of a VALIDATION_ERROR's `errors`, as pydantic's `errors()` lists them. */
export const FieldErrorSchema = Type.Object({
  type: Type.String(),
  loc: Type.Array(Type.Union([Type.String(), Type.Integer()])),
  msg: Type.String(),
  input: Type.Unknown(),
});
export type FieldError = Static<typeof FieldErrorSchema>;

/** Answers are open: an OpenEnv server may add fields rollgym does not read. */
export const OPENENV_ANSWERS = {
  observation: Type.Object({
    type: Type.Literal("observation"),
    data: Type.Object({
      observation: Type.Object({}, { description: "an object of the observation's fields" }),
      reward: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
      done: Type.Boolean(),
    }),
  }),
  state: Type.Object({ type: Type.Literal("state"), data: Type.Object({}) }),
  error: Type.Object({
    type: Type.Literal("error"),
    data: Type.Object({
      message: Type.String(),
      code: Type.String(),
      errors: Type.Optional(Type.Array(FieldErrorSchema)),
    }),
  }),
};
export type OpenEnvAnswerType = keyof typeof OPENENV_ANSWERS;
export type OpenEnvAnswer = {
  [K in OpenEnvAnswerType]: Static<(typeof OPENENV_ANSWERS)[K]>;
}[OpenEnvAnswerType];
const ANSWER_TYPES = Object.keys(OPENENV_ANSWERS);

// --- checking --------------------------------------------------------------------------------

export type Checked<T> = { ok: true; value: T } | { ok: false; errors: FieldError[] };

const compiled = new Map<TSchema, Validator>();
function validator(schema: TSchema): Validator {
  let found = compiled.get(schema);
  if (found === undefined) {
    found = Compile(schema);
    compiled.set(schema, found);
  }
  return found;
}

/**
 * A parsed /ws frame as a message, or why not. `{unknownType}` for a type OpenEnv's server would
 * answer with UNKNOWN_TYPE.
 */
export function checkMessage(
  value: unknown,
): Checked<OpenEnvClientMessage> | { ok: false; unknownType: string } {
  if (!isPlainObject(value) || typeof value.type !== "string")
    return {
      ok: false,
      errors: [
        {
          type: "model_type",
          loc: [],
          msg: `a message must be a JSON object with a string "type" (${OPENENV_MESSAGE_TYPES.join(", ")})`,
          input: echo(value),
        },
      ],
    };
  if (!Object.hasOwn(OPENENV_CLIENT_MESSAGES, value.type)) return { ok: false, unknownType: value.type };
  return checkWith(OPENENV_CLIENT_MESSAGES[value.type as OpenEnvMessageType], value, []);
}

/** `value` against `schema` (at `loc`): itself when it fits, else the entries saying why not. */
export function checkWith<S extends TSchema>(
  schema: S,
  value: unknown,
  loc: (string | number)[],
): Checked<Static<S>> {
  if (validator(schema).Check(value)) return { ok: true, value: value as Static<S> };
  const errors = fieldErrors(schema as unknown as SchemaNode, value, loc);
  // The walk knows every keyword these schemas use; the fallback only guards a schema edited alone.
  return {
    ok: false,
    errors: errors.length > 0 ? errors : [leafError(schema as unknown as SchemaNode, value, loc)],
  };
}

/**
 * A remote's answer as OpenEnv's, or what is wrong with it in a line: "data.reward: must be …,
 * not …" (the first problem).
 */
export function checkAnswer(
  value: unknown,
): { ok: true; answer: OpenEnvAnswer } | { ok: false; problem: string } {
  if (!isPlainObject(value) || typeof value.type !== "string" || !isPlainObject(value.data))
    return { ok: false, problem: `${preview(value, 80)}, not {"type": …, "data": {…}}` };
  if (!Object.hasOwn(OPENENV_ANSWERS, value.type))
    return {
      ok: false,
      problem: `a ${preview(value.type)} message, not one of ${ANSWER_TYPES.join(", ")}`,
    };
  const checked = checkWith(OPENENV_ANSWERS[value.type as OpenEnvAnswerType], value, []);
  if (checked.ok) return { ok: true, answer: checked.value as OpenEnvAnswer };
  return { ok: false, problem: describe(checked.errors.slice(0, 1)) };
}

/** "loc: msg" for each entry, the error's one-line message. */
export function describe(errors: readonly FieldError[]): string {
  return errors.map((e) => (e.loc.length ? `${e.loc.join(".")}: ${e.msg}` : e.msg)).join("; ");
}

/** An error answer's frame: `{"type": "error", "data": {message, code, …extra}}`. */
export function errorFrame(
  code: OpenEnvErrorCode,
  message: string,
  extra: Record<string, unknown> = {},
): string {
  return JSON.stringify({ type: "error", data: { message, code, ...extra } });
}

/** A VALIDATION_ERROR's frame for `errors`. */
export function validationFrame(errors: FieldError[]): string {
  return errorFrame("VALIDATION_ERROR", `Invalid message: ${describe(errors)}`, { errors });
}

// --- the entries, written from the schema (rules shared with rollgym_envs' _field_errors) ----

/** A schema as plain JSON Schema: TypeBox's objects are that. */
export type SchemaNode = { readonly [keyword: string]: unknown };

const KINDS: Record<string, string> = {
  integer: "int_type",
  number: "float_type",
  string: "string_type",
  boolean: "bool_type",
  object: "dict_type",
  array: "list_type",
};

/**
 * Why `value` does not fit `node`, at `loc`: the unknown keys of a closed object (a few), else
 * the first missing field or the first field that does not fit; [] when it fits. Fields are
 * visited in their declared order; values inside an open object are not walked.
 */
export function fieldErrors(node: SchemaNode, value: unknown, loc: (string | number)[]): FieldError[] {
  const branch = branchFor(node, value);
  if (branch === null) return [leafError(node, value, loc)];
  if (branch.type === "object" && isPlainObject(value)) {
    const properties = (branch.properties ?? {}) as Record<string, SchemaNode>;
    const allowed = Object.keys(properties);
    if (branch.additionalProperties === false) {
      const extra = Object.keys(value).filter((key) => !Object.hasOwn(properties, key));
      if (extra.length > 0)
        return extra.slice(0, MAX_LISTED_ERRORS).map((key) => ({
          type: "extra_forbidden",
          loc: [...loc, clip(key)],
          msg: `is not a field here; allowed: ${allowed.join(", ")}`,
          input: echo(value[key]),
        }));
    }
    const required = (branch.required ?? []) as string[];
    for (const key of allowed) {
      if (!Object.hasOwn(value, key)) {
        if (required.includes(key))
          return [
            {
              type: "missing",
              loc: [...loc, key],
              msg: `is required: ${expected(properties[key])}`,
              input: echo(value),
            },
          ];
        continue;
      }
      const errors = fieldErrors(properties[key], value[key], [...loc, key]);
      if (errors.length > 0) return errors;
    }
    return [];
  }
  if (branch.type === "array" && Array.isArray(value) && branch.items !== undefined) {
    for (const [i, item] of value.entries()) {
      const errors = fieldErrors(branch.items as SchemaNode, item, [...loc, i]);
      if (errors.length > 0) return errors;
    }
    return [];
  }
  return withinBounds(branch, value) ? [] : [leafError(node, value, loc)];
}

/** The branch of `node` (itself, or one of its anyOf) whose type `value` has, or null. */
function branchFor(node: SchemaNode, value: unknown): SchemaNode | null {
  const branches = Array.isArray(node.anyOf) ? (node.anyOf as SchemaNode[]) : [node];
  const kind = jsonType(value);
  for (const branch of branches) {
    if (branch.const !== undefined) {
      if (branch.const === value) return branch;
    } else if (
      branch.type === undefined ||
      branch.type === kind ||
      (branch.type === "number" && kind === "integer")
    )
      return branch;
  }
  return null;
}

function jsonType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number")
    return Number.isInteger(value) ? "integer" : Number.isFinite(value) ? "number" : "non-finite";
  return typeof value;
}

function withinBounds(node: SchemaNode, value: unknown): boolean {
  if (typeof value === "number") {
    if (typeof node.minimum === "number" && value < node.minimum) return false;
    if (typeof node.maximum === "number" && value > node.maximum) return false;
  }
  if (typeof value === "string" && typeof node.maxLength === "number" && value.length > node.maxLength)
    return false;
  return true;
}

function leafError(node: SchemaNode, value: unknown, loc: (string | number)[]): FieldError {
  const typed = (Array.isArray(node.anyOf) ? (node.anyOf as SchemaNode[]) : [node]).find(
    (branch) => branch.type !== "null",
  );
  const kind = typed?.const !== undefined ? "literal_error" : (KINDS[typed?.type as string] ?? "value_error");
  return { type: kind, loc, msg: `must be ${expected(node)}, not ${preview(value)}`, input: echo(value) };
}

/** What a schema allows, in words: its description, else "an integer in [0, 9]", "a string or null". */
function expected(node: SchemaNode): string {
  if (typeof node.description === "string") return node.description;
  if (Array.isArray(node.anyOf)) return (node.anyOf as SchemaNode[]).map(expected).join(" or ");
  if (node.const !== undefined) return JSON.stringify(node.const);
  switch (node.type) {
    case "integer":
    case "number": {
      const noun = node.type === "integer" ? "an integer" : "a number";
      const { minimum: lo, maximum: hi } = node;
      if (lo !== undefined && hi !== undefined) return `${noun} in [${lo}, ${hi}]`;
      if (lo !== undefined) return `${noun} >= ${lo}`;
      if (hi !== undefined) return `${noun} <= ${hi}`;
      return noun;
    }
    case "string":
      return node.maxLength === undefined ? "a string" : `a string of at most ${node.maxLength} characters`;
    case "boolean":
      return "a boolean";
    case "null":
      return "null";
    case "array":
      return "an array";
    case "object":
      return "an object";
    default:
      return "a JSON value";
  }
}

/**
 * `input` as an error echoes it (pydantic's field): the value itself when it is small and
 * shallow, else its preview, so a deep or huge input is never walked again by JSON.stringify.
 */
function echo(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return typeof value === "string" ? clip(value) : value;
  const shown = preview(value, PREVIEW_CHARS);
  return shown.endsWith("...") || shown.includes("…") ? shown : value;
}
