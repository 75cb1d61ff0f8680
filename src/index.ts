// `import { … } from "rollgym"`: the package's public API. Environments (and what a plugin needs
// to write its own), configuration, rollouts, policies, the server, episode files and the CLI.

// Config checks for an env type's resolveConfig (what envs/ and examples/ use).
export { integerIn, numberIn, oneOf, overlayConfig, pairOf, stringMap } from "../envs/config.ts";
export * from "../envs/index.ts";
export { buildRegistry, type RegistryOptions } from "./cli/build-registry.ts";
export { run as runCli } from "./cli/main.ts";
export {
  ConfigError,
  type CustomEnvEntry,
  defaultConfig,
  describeConfig,
  type LoadConfigInput,
  type LoadedConfig,
  loadConfig,
  originOf,
  type RollgymConfig,
  validateConfig,
} from "./config/index.ts";
export { applyCustomEnvs, loadPlugins, type PluginRef, type RegisterEnvs } from "./config/registry.ts";
export { oraclePolicy, randomPolicy } from "./llm/builtin.ts";
export type { ChatMessage, SamplingParams } from "./llm/chat.ts";
export { ChatPolicy, type ChatPolicyOptions } from "./llm/openai-chat.ts";
export type { EpisodeView, Policy, PolicyRequest, PolicyResponse } from "./llm/policy.ts";
export {
  type EpisodeFile,
  type EpisodeFileHeader,
  readEpisodeFile,
  writeEpisodeFile,
} from "./record/episode-file.ts";
export { EpisodeFileError, type FileGroup, fileGroups, parseEpisodeText } from "./record/episode-reader.ts";
export type { BatchResult, EpisodeRecord, GroupResult, TurnRecord } from "./record/episode-record.ts";
export { type BatchRequest, runBatch } from "./rollout/batch.ts";
export { type FilterConfig, runGroupFilter } from "./rollout/filter.ts";
export { checkRolloutShape, DEFAULT_ROLLOUT_LIMITS, type RolloutLimits } from "./rollout/limits.ts";
export { mapActions, parseResponse } from "./rollout/parse.ts";
export { firstTurnMessages } from "./rollout/prompt.ts";
// batchRequest: resolveRequest's old name, kept for the package's callers.
export { configuredFrame, resolveRequest as batchRequest, resolveRequest } from "./rollout/request.ts";
export { buildServer, type RollgymServer, type ServerOptions } from "./server/app.ts";
