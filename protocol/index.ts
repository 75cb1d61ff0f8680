export * from "./codec.ts";
export * from "./messages.ts";
export * from "./version.ts";
