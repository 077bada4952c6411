// Incremental ZMTP decoder: greeting, then frames, resumable at any byte (Bun hands us arbitrary
// chunks). Safety rules: a declared length never drives an allocation — bodies that span chunks are
// collected as the bytes actually arrive and joined once complete, and every declared size is
// checked against the caps before anything is kept. Bodies inside one chunk are zero-copy views.
import {
  FLAG_COMMAND,
  FLAG_LONG,
  FLAG_MORE,
  GREETING_BYTES,
  type PeerGreeting,
  ZmtpProtocolError,
  checkGreeting,
} from "./protocol.ts";

export interface DecoderSink {
  greeting(g: PeerGreeting): void;
  /** `data` is the command body after the name. */
  command(name: string, data: Uint8Array): void;
  /** A complete multipart message (frames may be views into a receive chunk). */
  message(frames: Uint8Array[]): void;
}

export interface DecoderLimits {
  /** Cap on one message's total body bytes (and on one command). */
  maxMessageBytes: number;
  /** Cap on frames per multipart message: empty MORE frames must not grow an array forever. */
  maxFrames: number;
}

const S_GREETING = 0;
const S_HEADER = 1;
const S_BODY = 2;

const latin1 = new TextDecoder("latin1");

export class ZmtpDecoder {
  private state = S_GREETING;
  private readonly greeting = new Uint8Array(GREETING_BYTES);
  private greetingLen = 0;
  // Header bytes carried across chunks (at most 9).
  private readonly hdr = new Uint8Array(9);
  private hdrLen = 0;
  // Current frame.
  private flags = 0;
  private need = 0;
  private parts: Uint8Array[] = [];
  private partsLen = 0;
  // Current multipart message.
  private frames: Uint8Array[] = [];
  private msgBytes = 0;
  // Unprocessed input when paused or stopped mid-chunk.
  private cur: Uint8Array | undefined;
  private pos = 0;
  private backlog: Uint8Array[] = [];
  private backlogBytes = 0;
  private paused = false;
  private stopped = false;

  constructor(
    private readonly sink: DecoderSink,
    private readonly limits: DecoderLimits,
  ) {}

  /** Bytes held by the decoder (partial bodies + an unprocessed chunk tail). */
  get bufferedBytes(): number {
    return this.partsLen + (this.cur ? this.cur.length - this.pos : 0) + this.backlogBytes + this.msgBytes;
  }

  /** Stop for good (the connection is closing): the rest of the input is ignored. */
  stop(): void {
    this.stopped = true;
    this.cur = undefined;
    this.backlog = [];
    this.backlogBytes = 0;
    this.parts = [];
    this.frames = [];
  }

  /** Stop after the current message; input stays buffered until resume() (receive backpressure). */
  pause(): void {
    this.paused = true;
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.run();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** Feed bytes. Throws ZmtpProtocolError on malformed input; the caller closes the connection. */
  push(chunk: Uint8Array): void {
    if (this.stopped || chunk.length === 0) return;
    if (this.cur) {
      // Paused with input left: queue the chunk (joining would copy the tail on every push).
      this.backlog.push(chunk);
      this.backlogBytes += chunk.length;
      return;
    }
    this.cur = chunk;
    this.pos = 0;
    if (!this.paused) this.run();
  }

  private run(): void {
    while (this.cur && !this.paused && !this.stopped) {
      this.runChunk();
      if (!this.cur && this.backlog.length > 0) {
        this.cur = this.backlog.shift()!;
        this.backlogBytes -= this.cur.length;
        this.pos = 0;
      }
    }
  }

  private runChunk(): void {
    const buf = this.cur!;
    const len = buf.length;
    let pos = this.pos;
    while (pos < len && !this.paused && !this.stopped) {
      if (this.state === S_HEADER) {
        if (this.hdrLen === 0 && len - pos >= 9) {
          // Fast path: the whole header is in this chunk.
          const flags = buf[pos]!;
          let size = buf[pos + 1]!;
          let hlen = 2;
          if ((flags & FLAG_LONG) !== 0 || ((flags & FLAG_COMMAND) !== 0 && size === 0)) {
            size = this.longSize(buf, pos + 1);
            hlen = 9;
          }
          pos += hlen;
          this.beginFrame(flags, size);
        } else {
          this.hdr[this.hdrLen++] = buf[pos++]!;
          const want = this.headerLength();
          if (this.hdrLen < want) continue;
          const flags = this.hdr[0]!;
          const size = want === 2 ? this.hdr[1]! : this.longSize(this.hdr, 1);
          this.hdrLen = 0;
          this.beginFrame(flags, size);
        }
        if (this.need === 0) this.endFrame(new Uint8Array(0));
        continue;
      }
      if (this.state === S_BODY) {
        const avail = len - pos;
        if (this.partsLen === 0 && avail >= this.need) {
          // A view, not subarray(): JSC's subarray goes through the species lookup and was the
          // decoder's top cost in profiles.
          const body = new Uint8Array(buf.buffer, buf.byteOffset + pos, this.need);
          pos += this.need;
          this.endFrame(body);
        } else if (avail >= this.need - this.partsLen) {
          const take = this.need - this.partsLen;
          this.parts.push(buf.subarray(pos, pos + take));
          pos += take;
          const body = new Uint8Array(this.need);
          let at = 0;
          for (const p of this.parts) {
            body.set(p, at);
            at += p.length;
          }
          this.parts = [];
          this.partsLen = 0;
          this.endFrame(body);
        } else {
          // Copy the partial piece: keeping a view would pin the whole receive chunk.
          this.parts.push(buf.slice(pos));
          this.partsLen += avail;
          pos = len;
        }
        continue;
      }
      // Greeting.
      const take = Math.min(GREETING_BYTES - this.greetingLen, len - pos);
      this.greeting.set(buf.subarray(pos, pos + take), this.greetingLen);
      this.greetingLen += take;
      pos += take;
      const g = checkGreeting(this.greeting, this.greetingLen);
      if (g) {
        this.state = S_HEADER;
        this.sink.greeting(g);
      }
    }
    if (this.stopped) return;
    if (pos >= len) {
      this.cur = undefined;
      this.pos = 0;
    } else {
      this.pos = pos;
    }
  }

  /** Header length once the flags and first size byte are in (hdrLen >= 1). */
  private headerLength(): number {
    if (this.hdrLen < 2) return 2;
    const flags = this.hdr[0]!;
    // libzmq 4.3.4 bug (docs/references.md#zmtp-1.11): a SUBSCRIBE of a 246-255 byte topic is sent with flags
    // 04 (no LONG) but an 8-byte size. A short command of size 0 is impossible (the name needs a
    // byte), so a 00 there means that 8-byte size starts at this byte.
    if ((flags & FLAG_LONG) !== 0 || ((flags & FLAG_COMMAND) !== 0 && this.hdr[1] === 0)) return 9;
    return 2;
  }

  private longSize(b: Uint8Array, at: number): number {
    const hi = ((b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!) >>> 0;
    const lo = ((b[at + 4]! << 24) | (b[at + 5]! << 16) | (b[at + 6]! << 8) | b[at + 7]!) >>> 0;
    // Anything of 4 GiB or more is over every cap we allow; report it without building the number.
    if (hi !== 0) throw new ZmtpProtocolError(`declared frame size ${hi * 0x1_0000_0000 + lo} bytes exceeds max ${this.limits.maxMessageBytes}`);
    return lo;
  }

  private beginFrame(flags: number, size: number): void {
    if ((flags & FLAG_COMMAND) !== 0) {
      if ((flags & FLAG_MORE) !== 0) throw new ZmtpProtocolError("command frame with MORE flag");
      if (this.frames.length > 0) throw new ZmtpProtocolError("command frame inside a multipart message");
      if (size === 0) throw new ZmtpProtocolError("empty command frame");
      if (size > this.limits.maxMessageBytes) throw new ZmtpProtocolError(`command of ${size} bytes exceeds max ${this.limits.maxMessageBytes}`);
    } else {
      if (this.msgBytes + size > this.limits.maxMessageBytes) {
        throw new ZmtpProtocolError(`message of at least ${this.msgBytes + size} bytes exceeds max ${this.limits.maxMessageBytes}`);
      }
      if (this.frames.length >= this.limits.maxFrames) throw new ZmtpProtocolError(`message has more than ${this.limits.maxFrames} frames`);
    }
    this.flags = flags;
    this.need = size;
    this.state = S_BODY;
  }

  private endFrame(body: Uint8Array): void {
    this.state = S_HEADER;
    const flags = this.flags;
    if ((flags & FLAG_COMMAND) !== 0) {
      const nameLen = body[0]!;
      if (nameLen === 0 || 1 + nameLen > body.length) throw new ZmtpProtocolError(`malformed command (name length ${nameLen}, body ${body.length} bytes)`);
      const name = latin1.decode(body.subarray(1, 1 + nameLen));
      this.sink.command(name, body.subarray(1 + nameLen));
      return;
    }
    if ((flags & FLAG_MORE) !== 0) {
      this.frames.push(body);
      this.msgBytes += body.length;
      return;
    }
    let frames: Uint8Array[];
    if (this.frames.length === 0) {
      frames = [body];
    } else {
      frames = this.frames;
      frames.push(body);
      this.frames = [];
      this.msgBytes = 0;
    }
    this.sink.message(frames);
  }
}
