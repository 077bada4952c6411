// XXH3-64 with a full 64-bit seed, in BigInt arithmetic. Bun.hash.xxHash3 keeps only the low 32 bits
// of its seed (checked against libxxhash: seeds >= 2^32 give different digests), and Dynamo folds a
// LoRA name into the seed as `1337 + xxh3_64(name)`, a full 64-bit value. So seeds below 2^32 go to
// the native function and larger ones come here. Slow (microseconds per block), used only for LoRA.
// Written from the XXH3 specification (xxhash.h 0.8); verified against python3-xxhash vectors.

const M64 = (1n << 64n) - 1n;
const P32_1 = 0x9e3779b1n;
const P32_2 = 0x85ebca77n;
const P32_3 = 0xc2b2ae3dn;
const P64_1 = 0x9e3779b185ebca87n;
const P64_2 = 0xc2b2ae3d27d4eb4fn;
const P64_3 = 0x165667b19e3779f9n;
const P64_4 = 0x85ebca77c2b2ae63n;
const P64_5 = 0x27d4eb2f165667c5n;
const PRIME_MX1 = 0x165667919e3779f9n;
const PRIME_MX2 = 0x9fb21c651e98df25n;

// The 192-byte default secret (kSecret).
const K_SECRET = Uint8Array.from(
  (
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671fcb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c" +
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364" +
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
  ).match(/../g)!.map((h) => parseInt(h, 16)),
);
const SECRET_SIZE = 192;
const STRIPE_LEN = 64;
const ACC_NB = 8;

function r64(b: Uint8Array, o: number): bigint {
  const lo = (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;
  const hi = (b[o + 4]! | (b[o + 5]! << 8) | (b[o + 6]! << 16) | (b[o + 7]! << 24)) >>> 0;
  return (BigInt(hi) << 32n) | BigInt(lo);
}
function r32(b: Uint8Array, o: number): bigint {
  return BigInt((b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0);
}
const mul = (a: bigint, b: bigint) => (a * b) & M64;
const add = (a: bigint, b: bigint) => (a + b) & M64;
const sub = (a: bigint, b: bigint) => (a - b) & M64;
function fold128(a: bigint, b: bigint): bigint {
  const p = a * b;
  return (p & M64) ^ (p >> 64n);
}
const rotl = (x: bigint, r: bigint) => ((x << r) | (x >> (64n - r))) & M64;
function swap64(x: bigint): bigint {
  let r = 0n;
  for (let i = 0n; i < 64n; i += 8n) r = (r << 8n) | ((x >> i) & 0xffn);
  return r;
}
function swap32(x: bigint): bigint {
  return ((x & 0xffn) << 24n) | (((x >> 8n) & 0xffn) << 16n) | (((x >> 16n) & 0xffn) << 8n) | ((x >> 24n) & 0xffn);
}
function avalanche(h: bigint): bigint {
  h ^= h >> 37n;
  h = mul(h, PRIME_MX1);
  return h ^ (h >> 32n);
}
function xxh64Avalanche(h: bigint): bigint {
  h ^= h >> 33n;
  h = mul(h, P64_2);
  h ^= h >> 29n;
  h = mul(h, P64_3);
  return h ^ (h >> 32n);
}
function rrmxmx(h: bigint, len: number): bigint {
  h ^= rotl(h, 49n) ^ rotl(h, 24n);
  h = mul(h, PRIME_MX2);
  h ^= (h >> 35n) + BigInt(len);
  h &= M64;
  h = mul(h, PRIME_MX2);
  return h ^ (h >> 28n);
}
function mix16(b: Uint8Array, o: number, s: Uint8Array, so: number, seed: bigint): bigint {
  return fold128(r64(b, o) ^ add(r64(s, so), seed), r64(b, o + 8) ^ sub(r64(s, so + 8), seed));
}

function len0to16(b: Uint8Array, len: number, seed: bigint): bigint {
  const s = K_SECRET;
  if (len > 8) {
    const flip1 = add(r64(s, 24) ^ r64(s, 32), seed);
    const flip2 = sub(r64(s, 40) ^ r64(s, 48), seed);
    const lo = r64(b, 0) ^ flip1;
    const hi = r64(b, len - 8) ^ flip2;
    const acc = (BigInt(len) + swap64(lo) + hi + fold128(lo, hi)) & M64;
    return avalanche(acc);
  }
  if (len >= 4) {
    const sd = seed ^ (swap32(seed & 0xffffffffn) << 32n);
    const in1 = r32(b, 0);
    const in2 = r32(b, len - 4);
    const flip = sub(r64(s, 8) ^ r64(s, 16), sd);
    return rrmxmx((in2 + (in1 << 32n)) ^ flip, len);
  }
  if (len > 0) {
    const c1 = BigInt(b[0]!);
    const c2 = BigInt(b[len >> 1]!);
    const c3 = BigInt(b[len - 1]!);
    const combined = (c1 << 16n) | (c2 << 24n) | c3 | (BigInt(len) << 8n);
    const flip = add(r32(s, 0) ^ r32(s, 4), seed);
    return xxh64Avalanche(combined ^ flip);
  }
  return xxh64Avalanche(seed ^ r64(s, 56) ^ r64(s, 64));
}

function len17to128(b: Uint8Array, len: number, seed: bigint): bigint {
  const s = K_SECRET;
  let acc = mul(BigInt(len), P64_1);
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc = add(acc, mix16(b, 48, s, 96, seed));
        acc = add(acc, mix16(b, len - 64, s, 112, seed));
      }
      acc = add(acc, mix16(b, 32, s, 64, seed));
      acc = add(acc, mix16(b, len - 48, s, 80, seed));
    }
    acc = add(acc, mix16(b, 16, s, 32, seed));
    acc = add(acc, mix16(b, len - 32, s, 48, seed));
  }
  acc = add(acc, mix16(b, 0, s, 0, seed));
  acc = add(acc, mix16(b, len - 16, s, 16, seed));
  return avalanche(acc);
}

function len129to240(b: Uint8Array, len: number, seed: bigint): bigint {
  const s = K_SECRET;
  let acc = mul(BigInt(len), P64_1);
  const rounds = len >> 4;
  for (let i = 0; i < 8; i++) acc = add(acc, mix16(b, 16 * i, s, 16 * i, seed));
  acc = avalanche(acc);
  for (let i = 8; i < rounds; i++) acc = add(acc, mix16(b, 16 * i, s, 16 * (i - 8) + 3, seed));
  acc = add(acc, mix16(b, len - 16, s, 136 - 17, seed));
  return avalanche(acc);
}

function accumulate512(acc: bigint[], b: Uint8Array, o: number, s: Uint8Array, so: number): void {
  for (let i = 0; i < ACC_NB; i++) {
    const v = r64(b, o + 8 * i);
    const k = v ^ r64(s, so + 8 * i);
    acc[i ^ 1] = add(acc[i ^ 1]!, v);
    acc[i] = add(acc[i]!, (k & 0xffffffffn) * (k >> 32n));
  }
}

function hashLong(b: Uint8Array, len: number, seed: bigint): bigint {
  // Seeded long inputs use a secret derived from the seed.
  const s = new Uint8Array(SECRET_SIZE);
  const dv = new DataView(s.buffer);
  for (let i = 0; i < SECRET_SIZE / 16; i++) {
    dv.setBigUint64(16 * i, add(r64(K_SECRET, 16 * i), seed), true);
    dv.setBigUint64(16 * i + 8, sub(r64(K_SECRET, 16 * i + 8), seed), true);
  }
  const acc = [P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1];
  const stripesPerBlock = (SECRET_SIZE - STRIPE_LEN) / 8;
  const blockLen = STRIPE_LEN * stripesPerBlock;
  const blocks = Math.floor((len - 1) / blockLen);
  for (let n = 0; n < blocks; n++) {
    for (let st = 0; st < stripesPerBlock; st++) accumulate512(acc, b, n * blockLen + st * STRIPE_LEN, s, st * 8);
    for (let i = 0; i < ACC_NB; i++) {
      let a = acc[i]!;
      a ^= a >> 47n;
      a ^= r64(s, SECRET_SIZE - STRIPE_LEN + 8 * i);
      acc[i] = mul(a, P32_1);
    }
  }
  const stripes = Math.floor((len - 1 - blockLen * blocks) / STRIPE_LEN);
  for (let st = 0; st < stripes; st++) accumulate512(acc, b, blocks * blockLen + st * STRIPE_LEN, s, st * 8);
  accumulate512(acc, b, len - STRIPE_LEN, s, SECRET_SIZE - STRIPE_LEN - 7);
  let result = mul(BigInt(len), P64_1);
  for (let i = 0; i < 4; i++) {
    result = add(result, fold128(acc[2 * i]! ^ r64(s, 11 + 16 * i), acc[2 * i + 1]! ^ r64(s, 11 + 16 * i + 8)));
  }
  return avalanche(result);
}

/** XXH3-64 of `data` with a 64-bit `seed` (reference implementation, BigInt). */
export function xxh3_64(data: Uint8Array, seed: bigint = 0n): bigint {
  const sd = seed & M64;
  const len = data.length;
  if (len <= 16) return len0to16(data, len, sd);
  if (len <= 128) return len17to128(data, len, sd);
  if (len <= 240) return len129to240(data, len, sd);
  return hashLong(data, len, sd);
}
