// random: a uniform draw through the seeded Rng (reproducible for a seed; load is shown, not used).
import { preset } from "./preset.ts";

export const random = preset({ name: "random", spec: () => ({ filters: [], scorers: [], picker: "random" }) });
