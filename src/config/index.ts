// Public surface of src/config: import from here.
export { applyOverrides, configToYaml, defaultConfig, loadConfigFile, parseConfigText } from "./load.ts";
export type { ConfigResult, Overrides } from "./load.ts";
export { hasErrors, renderFinding, renderFindings } from "./findings.ts";
export type { Finding, Severity } from "./findings.ts";
export { parseHostPort } from "./checks.ts";
export type { HostPort } from "./checks.ts";
export { chooseDataDir, hostDefaults } from "./host.ts";
export type { DefaultsEnv } from "./spec.ts";
export { validateConfig } from "./validate.ts";
export { DEMO_MODEL } from "./schema.ts";
export * from "./types.ts";
