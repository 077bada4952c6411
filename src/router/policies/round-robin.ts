// round-robin: each model's requests cycle through its candidates in worker-id order (the
// `round-robin` picker's per-model counter, advanced only when a decision is committed).
import { preset } from "./preset.ts";

export const roundRobin = preset({ name: "round-robin", spec: () => ({ filters: [], scorers: [], picker: "round-robin" }) });
