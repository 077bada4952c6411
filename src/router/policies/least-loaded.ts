// least-loaded: the `load` scorer (effective load = in_flight + outside, ../load.ts) and the
// `lightest` picker (lowest load, then lowest KV usage, then a seeded random tie break).
import { preset } from "./preset.ts";

export const leastLoaded = preset({
  name: "least-loaded",
  spec: () => ({ filters: [], scorers: [{ type: "load", weight: 1 }], picker: "lightest" }),
});
