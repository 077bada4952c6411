// power-of-two: the `load` scorer (effective load in requests, ../load.ts) and a sampling picker:
// two distinct candidates drawn at random, the lighter wins (then lower KV usage, then a coin).
import { preset } from "./preset.ts";

export const powerOfTwo = preset({
  name: "power-of-two",
  spec: () => ({ filters: [], scorers: [{ type: "load", weight: 1 }], picker: "power-of-two" }),
});
