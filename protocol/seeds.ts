// The seed range, in a module that imports nothing so the web page can load it as it is.

/** Seeds are uint32: RAGEN seeds numpy's RNG with them (envs/rng/numpy-random-state.ts). */
export const MAX_SEED = 2 ** 32 - 1;
