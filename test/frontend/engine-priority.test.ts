// EnginePriorityUpstream: legs to engines that schedule by `priority` carry the request's rank in the
// body (set, overwriting a client's own) and on the leg; other workers and endpoints go unchanged.
import { describe, expect, test } from "bun:test";
import { EnginePriorityUpstream, enginePriority } from "../../src/frontend/engine-priority.ts";
import type { LegRequest, Upstream } from "../../src/request/upstream.ts";
import { driverFor } from "../../src/engine/drivers/registry.ts";

function capture() {
  const sent: LegRequest[] = [];
  const inner = { format: {} as never, send: (leg: LegRequest) => void sent.push(leg) } as unknown as Upstream<Uint8Array>;
  const up = new EnginePriorityUpstream(inner, { supports: (w) => w === "prio", priorityOf: (id) => (id === "r1" ? enginePriority(1, true) : undefined) });
  const leg = (workerId: string, requestId = "r1", endpoint: LegRequest["endpoint"] = "chat"): LegRequest => ({ id: `${requestId}.0`, requestId, workerId, workerUrl: "http://x", endpoint, body: JSON.stringify({ model: "m", priority: -99 }), stream: false });
  const send = (l: LegRequest) => up.send(l, new AbortController().signal, () => {});
  return { sent, leg, send };
}

describe("engine priority", () => {
  test("rank: higher class → lower value; over its fair share → one later", () => {
    expect(enginePriority(0, false)).toBe(0);
    expect(enginePriority(0, true)).toBe(1);
    expect(enginePriority(1, false)).toBe(-2);
    expect(enginePriority(1, true)).toBeLessThan(enginePriority(0, false));
  });

  test("set on legs to supporting engines only, overwriting the client's", () => {
    const { sent, leg, send } = capture();
    send(leg("prio"));
    send(leg("plain"));
    send(leg("prio", "r2"));
    send(leg("prio", "r1", "embeddings"));
    expect(JSON.parse(sent[0]!.body).priority).toBe(-1);
    expect(sent[0]!.priority).toBe(-1);
    expect(JSON.parse(sent[1]!.body).priority).toBe(-99); // untouched: that engine would refuse ours
    expect(sent[1]!.priority).toBeUndefined();
    expect(sent[2]!.priority).toBeUndefined();
    expect(sent[3]!.priority).toBeUndefined();
  });

  test("the drivers say which launches schedule by priority", () => {
    expect(driverFor("vllm").requestPriority?.(["--scheduling-policy", "priority"])).toBe(true);
    expect(driverFor("vllm").requestPriority?.(["--scheduling-policy=fcfs"])).toBe(false);
    expect(driverFor("sim").requestPriority?.(["--scheduling-policy=priority"])).toBe(true);
    expect(driverFor("sim").requestPriority?.([])).toBe(false);
    expect(driverFor("sglang").requestPriority).toBeUndefined();
  });
});
