// Finds processes spawned while Bun collects tests (see test/suite-hygiene.test.ts for why).
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";

const SPAWN = /^(spawnSync|spawn|execSync|execFileSync|execFile|exec|Bun\.spawn|Bun\.spawnSync|Bun\.\$|\$)$/;

export function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (name !== "fixtures" && name !== "node_modules") walk(p, out);
    } else if (name.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** The callee's name as written: `spawnSync`, `Bun.spawn`, `describe.skipIf(...)` → `describe`. */
function calleeName(e: ts.Expression): string {
  if (ts.isIdentifier(e)) return e.text;
  if (ts.isPropertyAccessExpression(e)) return `${calleeName(e.expression)}.${e.name.text}`;
  if (ts.isCallExpression(e)) return calleeName(e.expression);
  return "";
}

/** Whether `fn` is the callback of a describe(...) call, which Bun runs while collecting. */
function isDescribeBody(fn: ts.Node): boolean {
  const call = fn.parent;
  if (!call || !ts.isCallExpression(call) || !call.arguments.includes(fn as ts.Expression)) return false;
  return calleeName(call.expression).split(".")[0] === "describe";
}

export function collectionTimeSpawns(path: string, text: string): string[] {
  const sf = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (n: ts.Node): void => {
    const spawnCall = (ts.isCallExpression(n) && SPAWN.test(calleeName(n.expression)))
      || (ts.isTaggedTemplateExpression(n) && SPAWN.test(calleeName(n.tag)));
    if (spawnCall) {
      let p: ts.Node | undefined = n.parent;
      while (p && !ts.isFunctionLike(p)) p = p.parent;
      if (!p || isDescribeBody(p)) {
        const { line } = sf.getLineAndCharacterOfPosition(n.getStart(sf));
        found.push(`${path}:${line + 1}: ${n.getText(sf).slice(0, 60)}`);
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return found;
}

