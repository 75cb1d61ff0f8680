// Public surface of rollgym's environments; usable on its own, it imports nothing else of ours.
export { ARM_NAMES, BanditEnv, bandit } from "./bandit/index.ts";
export { createRegistry, RAGEN_TAGS } from "./catalog.ts";
export { type ConformanceCheck, checkConformance } from "./conformance.ts";
export { FrozenLakeEnv, frozenLake, generateMap } from "./frozen-lake/index.ts";
export { pyFloatRepr, pyIntRepr, pyNumberRepr } from "./pyrepr.ts";
export { EnvRegistry, type ResolvedTag, type TagSpec, UnknownTagError } from "./registry.ts";
export * from "./rng/index.ts";
export { reseedAfterFailure, SokobanEnv, sokoban } from "./sokoban/index.ts";
export * from "./types.ts";
export * from "./wrappers/index.ts";
