// Public API of rollgym's configuration.
import { stringify } from "yaml";
import type { RollgymConfig } from "./schema.ts";

export { type LoadConfigInput, type LoadedConfig, loadConfig, originOf } from "./load.ts";
export {
  ConfigError,
  type ContextWindowMode,
  type CustomEnvEntry,
  configValue,
  defaultConfig,
  type EnvGroupLayout,
  effectiveFilterValue,
  type NormalizationGrouping,
  type NormalizationMethod,
  type PolicyName,
  type RollgymConfig,
  type RollgymMode,
  type RolloutFilterMetric,
  type RolloutFilterStrategy,
  type RolloutFilterType,
  validateConfig,
} from "./schema.ts";

/** The effective config as YAML (loadable again as a file), with the API key redacted for logs. */
export function describeConfig(config: RollgymConfig): string {
  const shown = structuredClone(config);
  if (shown.rollgym.llm.api_key !== null) shown.rollgym.llm.api_key = "<redacted>";
  return stringify(shown, { lineWidth: 0 });
}
