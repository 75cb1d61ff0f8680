// Env wrappers in Gymnasium's manner: each takes an env and is one, adding one rule.
export { ActionBudget } from "./action-budget.ts";
export { EpisodeStatistics } from "./episode-statistics.ts";
export { OrderEnforcing } from "./order-enforcing.ts";
export { type EnvRule, EnvRuleError, unwrap, Wrapper } from "./wrapper.ts";
