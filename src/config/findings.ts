// A finding is one problem in a config, named the way a user fixes it: the key path
// (`engines[1].gpus`) and the file line. Errors make the config unusable; warnings do not.

export type Severity = "error" | "warning";

export interface Finding {
  /** Key path, e.g. `engines[1].gpus`; "" when no key applies (YAML syntax, unreadable file). */
  path: string;
  /** 1-based line in the file; 0 when unknown (defaults, command-line overrides). */
  line: number;
  message: string;
  severity: Severity;
}

export const hasErrors = (findings: readonly Finding[]): boolean => findings.some((f) => f.severity === "error");

/** `engines[1].gpus: expected a list of integers at herd.yaml:14` — one line per finding. */
export function renderFinding(f: Finding, fileName: string | null): string {
  const head = f.severity === "warning" ? "warning: " : "";
  // Nothing to point at inside the file (unreadable file): lead with the file, like cp or ls do.
  if (!f.path && f.line === 0 && fileName !== null) return `${head}${fileName}: ${f.message}`;
  const where = fileName === null ? "" : f.line > 0 ? ` at ${fileName}:${f.line}` : ` in ${fileName}`;
  return `${head}${f.path ? `${f.path}: ` : ""}${f.message}${where}`;
}

/** Errors first, then warnings, each in file order. */
export function renderFindings(findings: readonly Finding[], fileName: string | null): string {
  const rank = (f: Finding) => (f.severity === "error" ? 0 : 1);
  return [...findings]
    .sort((a, b) => rank(a) - rank(b) || a.line - b.line)
    .map((f) => renderFinding(f, fileName))
    .join("\n");
}

/** Edit distance, bounded: enough to suggest `engine` → `engines`, `polcy` → `policy`. */
export function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0] ?? 0;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j] ?? 0;
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      prev[j] = Math.min(up + 1, (prev[j - 1] ?? 0) + 1, diag + cost);
      diag = up;
    }
  }
  return prev[b.length] ?? 0;
}

/** The closest candidate when it is plausibly a typo (distance ≤ 2, or ≤ a third of the length). */
export function suggest(word: string, candidates: readonly string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  const w = word.toLowerCase().replaceAll("-", "_");
  for (const c of candidates) {
    const d = editDistance(w, c.toLowerCase().replaceAll("-", "_"));
    if (d < bestD) [best, bestD] = [c, d];
  }
  if (best === null) return null;
  return bestD <= Math.max(2, Math.floor(word.length / 3)) && bestD < word.length ? best : null;
}

export const didYouMean = (word: string, candidates: readonly string[]): string => {
  const s = suggest(word, candidates);
  return s === null ? "" : ` (did you mean ${JSON.stringify(s)}?)`;
};
