// Which streams request migration may continue elsewhere (src/request/migrate.ts notReplayable):
// only chat streams it can replay exactly.
import { expect, test } from "bun:test";
import { notReplayable } from "../../src/request/migrate.ts";
import type { Leg } from "../../src/request/plan.ts";

const leg = (body: Record<string, unknown>, over: Partial<Leg> = {}): Leg => ({
  name: "main", route: { model: "m", sessionId: null, promptTokens: 1 }, endpoint: "chat", body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }], ...body }), stream: true, maxTokens: 10, ...over,
});

test("chat streams migrate; what cannot be replayed exactly does not", () => {
  expect(notReplayable(leg({}))).toBeNull();
  expect(notReplayable(leg({ n: 1, logprobs: false, tools: [] }))).toBeNull();
  expect(notReplayable(leg({ n: 2 }))).toBe("n");
  expect(notReplayable(leg({ logprobs: true }))).toBe("logprobs");
  expect(notReplayable(leg({ top_logprobs: 3 }))).toBe("top_logprobs");
  expect(notReplayable(leg({ response_format: { type: "json_object" } }))).toBe("response_format");
  expect(notReplayable(leg({ guided_json: {} }))).toBe("guided_json");
  expect(notReplayable(leg({ structured_outputs: { json: {} } }))).toBe("structured_outputs");
  expect(notReplayable(leg({ tools: [{ type: "function" }] }))).toBe("tools");
  expect(notReplayable(leg({ continue_final_message: true }))).toBe("continue_final_message");
  expect(notReplayable(leg({}, { stream: false }))).toBe("not a chat stream");
  expect(notReplayable(leg({}, { endpoint: "completions" }))).toBe("not a chat stream");
});
