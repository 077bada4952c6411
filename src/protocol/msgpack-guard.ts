// Structural pre-scan of untrusted msgpack before any decoder sees it. It walks the bytes without
// allocating and rejects, with a typed error:
//   - extension types (ext8/16/32, fixext): code-capable decoding is this ecosystem's most common
//     vulnerability (SGLang's msgpack-wrapped pickle, reliability.md §2); herd's formats use none;
//   - any declared length that the remaining bytes cannot back (a str32/array32 header claiming
//     4 GiB in a 20-byte payload), so a declared length never drives an allocation;
//   - nesting deeper than `maxDepth`, the reserved byte 0xc1, truncation and trailing bytes.

export class MsgpackRejected extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(`${message} at byte ${offset}`);
    this.name = "MsgpackRejected";
  }
}

export interface MsgpackLimits {
  /** Open containers at once (the envelope counts as 1). */
  maxDepth: number;
  maxBytes: number;
}

export const DEFAULT_LIMITS: MsgpackLimits = { maxDepth: 32, maxBytes: 64 * 1024 * 1024 };

export function checkMsgpack(b: Uint8Array, limits: MsgpackLimits = DEFAULT_LIMITS): void {
  const len = b.length;
  if (len > limits.maxBytes) throw new MsgpackRejected(`payload of ${len} bytes exceeds ${limits.maxBytes}`, 0);
  const stack: number[] = [];
  let remaining = 1;
  let pos = 0;
  const need = (n: number) => {
    if (n > len - pos) throw new MsgpackRejected(`truncated: ${n} bytes declared, ${len - pos} left`, pos);
  };
  const u16 = (o: number) => (b[o]! << 8) | b[o + 1]!;
  const u32 = (o: number) => ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
  for (;;) {
    while (remaining === 0) {
      if (stack.length === 0) {
        if (pos !== len) throw new MsgpackRejected(`${len - pos} trailing bytes`, pos);
        return;
      }
      remaining = stack.pop()!;
    }
    remaining--;
    need(1);
    const h = b[pos]!;
    let items = -1; // container element count (maps count keys and values)
    if (h <= 0x7f || h >= 0xe0 || h === 0xc0 || h === 0xc2 || h === 0xc3) {
      pos += 1;
    } else if (h <= 0x8f) {
      items = (h & 0x0f) * 2;
      pos += 1;
    } else if (h <= 0x9f) {
      items = h & 0x0f;
      pos += 1;
    } else if (h <= 0xbf) {
      const n = h & 0x1f;
      pos += 1;
      need(n);
      pos += n;
    } else {
      switch (h) {
        case 0xc4:
        case 0xd9: {
          need(2);
          const n = b[pos + 1]!;
          pos += 2;
          need(n);
          pos += n;
          break;
        }
        case 0xc5:
        case 0xda: {
          need(3);
          const n = u16(pos + 1);
          pos += 3;
          need(n);
          pos += n;
          break;
        }
        case 0xc6:
        case 0xdb: {
          need(5);
          const n = u32(pos + 1);
          pos += 5;
          need(n);
          pos += n;
          break;
        }
        case 0xcc:
        case 0xd0:
          need(2);
          pos += 2;
          break;
        case 0xcd:
        case 0xd1:
          need(3);
          pos += 3;
          break;
        case 0xca:
        case 0xce:
        case 0xd2:
          need(5);
          pos += 5;
          break;
        case 0xcb:
        case 0xcf:
        case 0xd3:
          need(9);
          pos += 9;
          break;
        case 0xdc:
          need(3);
          items = u16(pos + 1);
          pos += 3;
          break;
        case 0xdd:
          need(5);
          items = u32(pos + 1);
          pos += 5;
          break;
        case 0xde:
          need(3);
          items = u16(pos + 1) * 2;
          pos += 3;
          break;
        case 0xdf:
          need(5);
          items = u32(pos + 1) * 2;
          pos += 5;
          break;
        case 0xc1:
          throw new MsgpackRejected("reserved byte 0xc1", pos);
        default:
          // 0xc7–0xc9 ext8/16/32 and 0xd4–0xd8 fixext.
          throw new MsgpackRejected(`msgpack extension type (0x${h.toString(16)}) rejected`, pos);
      }
    }
    if (items > 0) {
      // Every element takes at least one byte, so the count is bounded by what is left.
      need(items);
      if (stack.length + 1 > limits.maxDepth) throw new MsgpackRejected(`nesting deeper than ${limits.maxDepth}`, pos);
      stack.push(remaining);
      remaining = items;
    }
  }
}
