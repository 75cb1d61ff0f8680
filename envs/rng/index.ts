// Bit-exact emulations of the random generators RAGEN's environments consume.

export { MT19937, type MT19937State } from "./mt19937.ts";
export { NumpyGenerator, type NumpyGeneratorState } from "./numpy-generator.ts";
export { NumpyRandomState, type NumpyRandomStateState } from "./numpy-random-state.ts";
export { PCG64, type PCG64State } from "./pcg64.ts";
export { PythonRandom, type PythonRandomState } from "./python-random.ts";
export { SeedSequence } from "./seed-sequence.ts";
