// session: requests carrying the same session id go to the same worker (its KV cache holds the
// conversation): the `load` scorer and the `ring` picker, a consistent-hash ring with virtual nodes
// and bounded load (router.session; ../pipeline/pickers.ts). No session id → least-loaded.
import { preset } from "./preset.ts";

export const session = preset({ name: "session", spec: () => ({ filters: [], scorers: [{ type: "load", weight: 1 }], picker: "ring" }) });
