// Argument parsing for the day-2 commands (status, drain, undrain, logs). They take boolean flags
// (--json, --node) and a short -n, which the generic parser in cli.ts does not, so they are
// pass-through commands that parse here. Bad usage throws OpsUsageError (exit 2).

export class OpsUsageError extends Error {
  override name = "OpsUsageError";
}

export interface OpsArgs {
  values: Record<string, string>;
  bools: Set<string>;
  positionals: string[];
  help: boolean;
}

export interface OpsFlagSpec {
  /** Flags taking a value: `--name V` or `--name=V`. */
  values: readonly string[];
  bools: readonly string[];
  /** Short aliases, e.g. { n: "lines" }. */
  short?: Readonly<Record<string, string>>;
  maxPositionals: number;
}

export function parseOpsArgs(argv: readonly string[], spec: OpsFlagSpec): OpsArgs {
  const out: OpsArgs = { values: {}, bools: new Set(), positionals: [], help: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? "";
    if (a === "--help" || a === "-h") {
      out.help = true;
      continue;
    }
    if (a === "--") {
      out.positionals.push(...argv.slice(i + 1));
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    const long = /^--([A-Za-z0-9-]+)(?:=(.*))?$/s.exec(a);
    const short = /^-([A-Za-z])(.*)$/s.exec(a);
    if (long) {
      name = long[1];
      inline = long[2];
    } else if (short && spec.short?.[short[1]!]) {
      name = spec.short[short[1]!];
      inline = short[2] === "" ? undefined : short[2]!.replace(/^=/, "");
    } else if (a.startsWith("-") && a !== "-") {
      throw new OpsUsageError(`unknown flag ${a}`);
    } else {
      out.positionals.push(a);
      continue;
    }
    if (name !== undefined && spec.bools.includes(name)) {
      if (inline !== undefined) throw new OpsUsageError(`--${name} takes no value`);
      out.bools.add(name);
    } else if (name !== undefined && spec.values.includes(name)) {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new OpsUsageError(`--${name} needs a value`);
      out.values[name] = v;
    } else {
      throw new OpsUsageError(`unknown flag ${a}`);
    }
  }
  if (!out.help && out.positionals.length > spec.maxPositionals)
    throw new OpsUsageError(`unexpected argument ${JSON.stringify(out.positionals[spec.maxPositionals])}`);
  return out;
}
