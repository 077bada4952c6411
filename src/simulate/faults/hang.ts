// A leg on an engine that may hang (the fault simulation's pause_engine: a wedged process, a stuck
// kernel): while it is paused its answer head and chunks wait. The head deadline is HttpUpstream's
// own (frontend.engine_first_byte_timeout_ms → head_timeout, which ejects the worker), and an abort
// (first-token or idle deadline, client gone) still ends the leg at once with an error, as fetch()
// rejects an aborted request whether or not the server ever answers.
import type { Clock } from "../../core/clock.ts";
import type { LegError, LegReply, LegRequest, ReadResult, Upstream } from "../../request/upstream.ts";
import type { PdChunk } from "../pd-upstream.ts";

/** An engine process's hang state: what it owes its readers waits in `held` while `paused`. */
export interface Hangable {
  paused: boolean;
  held: (() => void)[];
}

/**
 * One leg on an engine that may hang: while it is paused its answer head and chunks wait. An
 * abort (first-token or idle deadline, client gone) still ends the leg at once with an error, as
 * fetch() rejects an aborted request whether or not the server ever answers.
 */
export function sendHangable(p: Hangable, clock: Clock, headTimeoutMs: number, sim: Upstream<PdChunk>, leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<PdChunk> | LegError) => void): void {
  let headHeld = false;
  let readHeld: ((r: ReadResult<PdChunk>) => void) | null = null;
  let dead = false;
  signal.addEventListener("abort", () => {
    if (dead) return;
    if (headHeld) {
      dead = true;
      reply({ error: signal.reason ?? new Error("aborted") });
    } else if (readHeld) {
      const cb = readHeld;
      readHeld = null;
      dead = true;
      cb({ done: false, error: new Error("aborted") });
    }
  }, { once: true });
  // HttpUpstream's own deadline on a stream's response head (frontend.engine_first_byte_timeout_ms).
  const headTimer = clock.setTimer(headTimeoutMs, () => {
    if (!headHeld || dead) return;
    dead = true;
    reply({ error: new Error(`no response head within ${headTimeoutMs} ms`), kind: "head_timeout" });
  });
  sim.send(leg, signal, (r) => {
    const head = () => {
      headHeld = false;
      headTimer.cancel();
      if (dead) return;
      if ("error" in r || r.body === null) return reply(r);
      const body = r.body;
      const read = (cb: (x: ReadResult<PdChunk>) => void) =>
        body.read((x) => {
          if (!p.paused) return cb(x);
          readHeld = cb;
          p.held.push(() => {
            if (readHeld !== cb) return;
            readHeld = null;
            if (!dead) cb(x);
          });
        });
      reply({ ...r, body: { read, cancel: () => body.cancel() } });
    };
    if (!p.paused) return head();
    // sim.send answers at once; only a hung engine holds the head
    headHeld = true;
    p.held.push(head);
  });
}
