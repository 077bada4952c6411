// English prose, code and chat for the built-in tokenizer's count check against Qwen3
// (builtin-counts.test.ts). Written for this repository; the Austen paragraph is public domain.

export const PROSE = `It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful property of some one or other of their daughters.

The old lighthouse stood at the end of a narrow spit of rock, and for most of the year nobody went near it. In winter the waves came over the path twice a day, and the keeper's cottage had been empty since the light was automated in the spring of 1987. Children from the village dared each other to touch the door, then ran back along the causeway before the tide could catch them.

When the council finally decided to sell the building, three very different buyers arrived on the same grey afternoon. The first was a retired engineer who wanted to restore the lamp room exactly as it had been. The second was a young couple with plans for a small hotel, complete with a restaurant and a terrace overlooking the harbour. The third said almost nothing, walked slowly around the tower with her hands in her pockets, and left without asking a single question about the price.

Economists often describe a market as efficient when prices reflect all available information. In practice, information is unevenly distributed, expensive to gather, and frequently misunderstood. A farmer who watches the weather closely may know more about next season's harvest than an analyst in a distant city, yet the analyst's forecast will usually move the price. Understanding why this happens requires looking at incentives, institutions and the history of how particular markets developed.

Scientists measuring the temperature of the deep ocean have found that it is rising more slowly than the surface, but steadily. Because water stores so much heat, even a small change represents an enormous amount of energy. Researchers use autonomous floats that sink to two thousand metres, drift with the currents for about ten days, and then rise to the surface to transmit their measurements by satellite before diving again.`;

export const CODE = `import json
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Order:
    order_id: int
    customer: str
    items: list[tuple[str, int, float]] = field(default_factory=list)
    discount: Optional[float] = None

    def total(self) -> float:
        subtotal = sum(quantity * price for _, quantity, price in self.items)
        if self.discount is not None:
            subtotal *= 1.0 - self.discount
        return round(subtotal, 2)


def load_orders(path: str) -> list[Order]:
    """Read orders from a JSON file, skipping entries without a customer."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    orders = []
    for entry in raw:
        if not entry.get("customer"):
            continue
        orders.append(Order(entry["id"], entry["customer"], [tuple(i) for i in entry["items"]], entry.get("discount")))
    return orders

export interface CacheEntry<T> {
  value: T;
  expiresAt: number;
}

export class TtlCache<T> {
  private readonly entries = new Map<string, CacheEntry<T>>();

  constructor(private readonly ttlMs: number, private readonly maxEntries = 1000) {}

  get(key: string, now: number): T | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: T, now: number): void {
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(key, { value, expiresAt: now + this.ttlMs });
  }
}

function formatDuration(ms) {
  const seconds = Math.floor(ms / 1000);
  const minutes = Math.floor(seconds / 60);
  return minutes > 0 ? \`\${minutes}m \${seconds % 60}s\` : \`\${seconds}s\`;
}
`;

export const CHAT = [
  { role: "system", content: "You are a helpful assistant. Answer concisely and cite sources when you can." },
  { role: "user", content: "Can you explain the difference between a process and a thread in an operating system?" },
  {
    role: "assistant",
    content:
      "A process is an independent program in execution with its own address space, file descriptors and resources. A thread is a unit of execution inside a process: threads of the same process share memory and open files, but each has its own stack and registers. Creating a thread is cheaper than creating a process, and switching between threads is usually faster, but a bug in one thread can corrupt memory used by the others.",
  },
  { role: "user", content: "So when should I use multiple processes instead of threads?" },
  {
    role: "assistant",
    content:
      "Use processes when you need isolation: if one worker crashes, the others keep running. They are also the simple way to use several CPU cores in languages with a global interpreter lock, such as Python. Threads are a better fit when tasks share a lot of data and communicate often, because passing messages between processes means copying and serialising that data.",
  },
  { role: "user", content: "Thanks! Could you give me a short example in Python?" },
];
