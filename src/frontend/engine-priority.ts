// The engine takes the class too: for workers whose engine schedules by a request `priority`
// (vLLM with `--scheduling-policy priority`, vllm/v1/core/sched/request_queue.py: lower value
// first, preemption of the largest (priority, arrival); the sim engine likewise), each generation
// leg carries herd's rank of its request — so beside the fair queue (fair-queue.ts), which only
// decides who gets a slot, the engine's own waiting queue and preemption order follow it too.
// The rank: −2 × the request's priority class (higher class → lower value → first), + 1 while its
// tenant holds more than its fair share of the model's slots. Which workers take the field is the
// engine driver's capability (`requestPriority`), decided by the daemon; other workers get the leg
// unchanged (vLLM refuses a priority without the policy: processor.py "Priority scheduling is not
// enabled"). The field is set, not added: a client's own `priority` never reaches such an engine.
import type { LegReply, LegRequest, StreamFormat, Upstream } from "../request/upstream.ts";

export interface EnginePriorityOptions {
  /** Whether the worker's engine schedules by the request's `priority` field. */
  supports: (workerId: string) => boolean;
  /** The engine priority of a request by its id (lower first); undefined: none (leg unchanged). */
  priorityOf: (requestId: string) => number | undefined;
}

/** Engine priority of a request: class first (higher class, lower value), then over its fair share. */
export const enginePriority = (priorityClass: number, overShare: boolean) => -2 * priorityClass + (overShare ? 1 : 0);

export class EnginePriorityUpstream<C> implements Upstream<C> {
  readonly format: StreamFormat<C>;
  constructor(
    private readonly inner: Upstream<C>,
    private readonly o: EnginePriorityOptions,
  ) {
    this.format = inner.format;
  }

  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<C> | { error: unknown }) => void): void {
    if (leg.endpoint !== "chat" && leg.endpoint !== "completions") return this.inner.send(leg, signal, reply);
    const p = this.o.priorityOf(leg.requestId);
    if (p === undefined || !this.o.supports(leg.workerId)) return this.inner.send(leg, signal, reply);
    let body = leg.body;
    try {
      const json = JSON.parse(body) as unknown;
      if (json !== null && typeof json === "object" && !Array.isArray(json)) body = JSON.stringify({ ...(json as object), priority: p });
    } catch {
      // Not JSON (cannot happen for a checked generation body): sent unchanged.
    }
    this.inner.send({ ...leg, body, priority: p }, signal, reply);
  }
}
