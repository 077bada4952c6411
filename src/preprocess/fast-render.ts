// Chat prompts without re-rendering their long contents. A warm 32k-token request renders ~128 KiB
// through the template, flattens it and hashes it again on every request; the work is ~0.04 ms,
// but the 128–256 KiB of garbage per request is what made the render stage's wall time 0.5 ms p50
// (GC) on the shared box. Here the template renders the conversation with each message's content
// replaced by a short sentinel; the rendered skeleton is split on added tokens, and each piece is
// named by its parts (literal text and whole contents) instead of by its flattened text, so a
// known document costs one xxHash3 of its (already flat) string and no copy.
//
// Exact only when the template treats contents opaquely (concatenates them, never inspects them).
// Two guards: a self-check at load (`verifySkeleton`) renders probe conversations both ways and
// turns the path off for a template where any differs; per request only plain messages qualify
// (role + string content, no tools, no template kwargs, no continue_final_message), and a content
// must not contain `<`/`>` (tag tests such as Qwen3's '</think>' / '<tool_response>'), the sentinel
// characters or an added token, nor start or end with whitespace (strip-like filters) unless the
// self-check found its role's contents kept verbatim with edge whitespace in every probe position
// (Qwen3: system and user yes, assistant no — the last one is lstripped).
// Anything else takes the ordinary path (model.ts), which is always exact.
import { nextSequenceHash } from "../kv/hash.ts";
import type { ChatMessage } from "../tokenizer/index.ts";
import type { Piece, Splitter } from "./segments.ts";
import type { Render } from "./template.ts";

/** A text piece given by parts: literal strings and message contents, in order. */
export interface PartsPiece {
  parts: string[];
}

export type SkeletonPiece = number | PartsPiece;

const OPEN = "\uE000";
const CLOSE = "\uE001";
const SENTINEL = /\uE000(\d+)\uE001/g;
/** Distinguishes part-named piece keys from xxHash3 of a piece's text (model.ts pieceKey). */
const PARTS_TAG = 0x5041_5254_5300_0000n;
const UNSAFE = /[<>\uE000\uE001]/;
const SPACE = /\s/;
/** Only the two end characters: a regex like /^\s|\s$/ tries every position (0.2 ms per 128 KiB). */
const edgeSpace = (c: string) => c.length > 0 && (SPACE.test(c[0]!) || SPACE.test(c[c.length - 1]!));

/** What the load-time self-check allows; null = the skeleton path is off for the template. */
export interface SkeletonCheck {
  /** Roles whose contents may start or end with whitespace. */
  edgeSpaceRoles: ReadonlySet<string>;
}

const STRICT: SkeletonCheck = { edgeSpaceRoles: new Set() };

export function pieceText(p: PartsPiece): string {
  return p.parts.length === 1 ? p.parts[0]! : p.parts.join("");
}

/** Key of a part-named piece: a chain over the parts' xxHash3 (text of a long part is hashed, never copied). */
export function partsKey(p: PartsPiece): bigint {
  let k = PARTS_TAG;
  for (const s of p.parts) k = nextSequenceHash(k, Bun.hash.xxHash3(s));
  return k;
}

/** Whether a message list may take the skeleton path (see the header for why each rule). */
function plain(messages: readonly ChatMessage[], splitter: Splitter, check: SkeletonCheck): boolean {
  for (const m of messages) {
    const r = m as unknown as Record<string, unknown>;
    for (const k in r) if (k !== "role" && k !== "content") return false;
    if (typeof r.role !== "string" || typeof r.content !== "string") return false;
    const c = r.content;
    if (UNSAFE.test(c)) return false;
    if (edgeSpace(c) && !check.edgeSpaceRoles.has(r.role)) return false;
    // No added token inside: a plain regex scan over a flat string (~8 µs per 128 KiB).
    const pieces = splitter.split(c);
    if (pieces.length > 1 || (pieces.length === 1 && typeof pieces[0] === "number")) return false;
  }
  return true;
}

/**
 * The prompt's pieces through the skeleton, or null when the request does not qualify (or the
 * skeleton rendering fails: the ordinary path then raises the template's own error).
 */
export function skeletonPieces(
  render: Render,
  splitter: Splitter,
  messages: readonly ChatMessage[],
  addGenerationPrompt: boolean,
  check: SkeletonCheck = STRICT,
): SkeletonPiece[] | null {
  if (!plain(messages, splitter, check)) return null;
  const contents: string[] = [];
  const masked = messages.map((m, i) => {
    contents.push(m.content as string);
    return { role: m.role, content: `${OPEN}${i}${CLOSE}` } as ChatMessage;
  });
  let text: string;
  try {
    text = render(masked, { addGenerationPrompt });
  } catch {
    return null;
  }
  const seen = new Uint8Array(contents.length);
  const out: SkeletonPiece[] = [];
  for (const p of splitter.split(text)) {
    if (typeof p === "number") {
      out.push(p);
      continue;
    }
    const parts: string[] = [];
    let last = 0;
    SENTINEL.lastIndex = 0;
    for (let m = SENTINEL.exec(p); m !== null; m = SENTINEL.exec(p)) {
      const i = Number(m[1]);
      // A content rendered twice or a stray sentinel: not the shape this path assumes.
      if (!(i < contents.length) || seen[i]) return null;
      seen[i] = 1;
      if (m.index > last) parts.push(p.slice(last, m.index));
      if (contents[i] !== "") parts.push(contents[i]!);
      last = m.index + m[0].length;
    }
    if (last < p.length) parts.push(p.slice(last));
    if (p.includes(OPEN) || p.includes(CLOSE)) {
      // Sentinel characters left over (template cut one apart): give up on this request.
      if (parts.some((s) => s.includes(OPEN) || s.includes(CLOSE))) return null;
    }
    if (parts.length > 0) out.push({ parts });
  }
  // Every non-empty content must appear exactly once (a template dropping one is still exact
  // through the ordinary path, but not a shape worth trusting here).
  for (let i = 0; i < contents.length; i++) if (!seen[i] && contents[i] !== "") return null;
  return out;
}

/** The flattened pieces of a skeleton (what the ordinary path would have produced). */
export function flatPieces(sk: readonly SkeletonPiece[]): Piece[] {
  return sk.map((p) => (typeof p === "number" ? p : pieceText(p)));
}

const ROLES = ["system", "user", "assistant"];

/**
 * Self-check at load: for probe conversations, does the skeleton path give exactly the pieces of
 * rendering the real contents and splitting? Null turns the path off for this template; then, role
 * by role, the same probes with edge whitespace on that role's contents decide `edgeSpaceRoles`.
 */
export function verifySkeleton(render: Render, splitter: Splitter): SkeletonCheck | null {
  if (!agrees(render, splitter, PROBES, STRICT)) return null;
  const edgeSpaceRoles = new Set<string>();
  for (const role of ROLES) {
    const spaced = PROBES.map((conv) => conv.map((m) => (m.role === role ? { role, content: `\n ${m.content as string}\n\n ` } : m)));
    if (agrees(render, splitter, spaced, { edgeSpaceRoles: new Set([role]) })) edgeSpaceRoles.add(role);
  }
  return { edgeSpaceRoles };
}

const DOC = "Employee handbook.\nSection 1: leave is 25 days a year; ask your manager first.\n\nSection 2: expenses (receipts within 30 days).";
const LONG = Array.from({ length: 40 }, (_, i) => `Paragraph ${i}: policy text, line ${i}.`).join("\n");
const PROBES: ChatMessage[][] = [
  [{ role: "user", content: "Hello there" }],
  [{ role: "system", content: DOC }, { role: "user", content: "What about leave?" }],
  [{ role: "system", content: LONG }, { role: "user", content: "Summarise." }, { role: "assistant", content: "It is a policy." }, { role: "user", content: "More detail" }],
  [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello! How can I help?" }],
  [{ role: "system", content: "Be brief" }, { role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }, { role: "assistant", content: "d" }],
  [{ role: "user", content: "x" }, { role: "user", content: "y" }],
  [{ role: "assistant", content: "Opening line" }, { role: "user", content: "z" }],
];

function agrees(render: Render, splitter: Splitter, convs: readonly ChatMessage[][], check: SkeletonCheck): boolean {
  for (const conv of convs) {
    for (const agp of [true, false]) {
      let real: Piece[];
      try {
        real = splitter.split(render(conv, { addGenerationPrompt: agp }));
      } catch {
        continue; // the template rejects this shape; requests of that shape fail on the ordinary path
      }
      const sk = skeletonPieces(render, splitter, conv, agp, check);
      if (sk === null) return false;
      const fast = flatPieces(sk);
      if (fast.length !== real.length || fast.some((p, i) => p !== real[i])) return false;
    }
  }
  return true;
}
