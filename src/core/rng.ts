// Seeded randomness: every random choice (tie breaks, sampling, workload generation, fault
// injection) goes through an Rng so one seed reproduces a run.

export interface Rng {
  /** Uniform in [0, 1). */
  float(): number;
  /** Uniform integer in [0, n). */
  int(n: number): number;
  /** A child generator with an independent stream (for giving each component its own). */
  fork(): Rng;
}

/** SplitMix64-seeded xoshiro128** — fast, good quality, 32-bit state words. */
export class SeededRng implements Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number | bigint = 1) {
    let x = BigInt.asUintN(64, BigInt(seed));
    const next = (): number => {
      x = BigInt.asUintN(64, x + 0x9e3779b97f4a7c15n);
      let z = x;
      z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
      z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
      z = z ^ (z >> 31n);
      return Number(z & 0xffffffffn) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  private nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  float(): number {
    // 53 bits of randomness from two draws.
    const hi = this.nextU32() >>> 5;
    const lo = this.nextU32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  int(n: number): number {
    if (!(n > 0)) throw new RangeError(`Rng.int: n must be > 0, got ${n}`);
    return Math.floor(this.float() * n);
  }

  fork(): Rng {
    return new SeededRng(BigInt(this.nextU32()) * 4294967296n + BigInt(this.nextU32()));
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** Exponential inter-arrival time with the given mean, for Poisson processes. */
export function exponential(rng: Rng, mean: number): number {
  return -Math.log(1 - rng.float()) * mean;
}

/** A fresh nonzero 32-bit seed, for "seed 0 = random": the caller logs it so the run can be replayed. */
export function randomSeed(): number {
  return 1 + Math.floor(Math.random() * 0xfffffffe);
}
