// A vLLM engine without --num-gpu-blocks-override states its KV capacity only in /metrics
// (vllm:cache_config_info num_gpu_blocks): the scraper hands it to the ingest, which reserves once.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";

describe("capacity learned after start", () => {
  test("reserves once for a worker that started without a hint, within the shared cap", () => {
    const ingest = new KvIngest(new BlockIndex(), new VirtualClock(), undefined, { maxReservedBlocks: 10_000 });
    const src = () => ({ start: () => {}, close: () => {} });
    ingest.addWorker("a", src(), null, {});
    ingest.addWorker("b", src(), null, { capacityBlocks: 6_000 });
    expect(ingest.reservedBlocks()).toBe(6_000);
    ingest.setCapacity("a", 8_000);
    expect(ingest.reservedBlocks()).toBe(10_000); // capped by what is left of the budget
    expect(ingest.stream("a")!.reservedBlocks).toBe(4_000);
    ingest.setCapacity("a", 9_000); // already reserved: scrapes repeat, reservation does not
    ingest.setCapacity("b", 9_000); // had a hint from its command line
    ingest.setCapacity("nope", 9_000);
    expect(ingest.reservedBlocks()).toBe(10_000);
  });
});
