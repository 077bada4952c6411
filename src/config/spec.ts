// A tiny schema language for herd's YAML config. One description (src/config/schema.ts) written with
// these builders drives three things: the defaults, the validation walk over the YAML tree
// (resolve.ts), and the JSON Schema for editors (json-schema.ts). `Infer<S>` gives the TypeScript
// type a spec resolves to, so schema.ts can assert at compile time that it matches types.ts.

/** Values some defaults depend on (host name, data dir); computed by the shell, injected for tests. */
export interface DefaultsEnv {
  hostname: string;
  dataDir: string;
}

export type Default<T> = T | ((env: DefaultsEnv) => T);

interface Base<T> {
  /** One line for the JSON Schema and `herd config check`. */
  readonly doc: string;
  /** Absent (or null) keys take this; undefined = required. */
  readonly default?: Default<T>;
  /** Phantom field carrying the resolved type; never set. */
  readonly _type?: T;
}

/** A value check beyond the type; returns a message ("expected …") or null when fine. */
export type Check<T> = (value: T) => string | null;

export interface StringSpec extends Base<string> {
  readonly kind: "string";
  readonly nonEmpty?: boolean;
  /** JSON Schema pattern mirroring `check` for editors; the check is what herd enforces. */
  readonly pattern?: string;
  readonly check?: Check<string>;
  /** When absent, copy the resolved value of this sibling key (e.g. models[].path ← name). */
  readonly defaultFrom?: string;
}

export interface NumberSpec extends Base<number> {
  readonly kind: "int" | "number";
  readonly min?: number;
  readonly max?: number;
}

export interface BoolSpec extends Base<boolean> {
  readonly kind: "bool";
}

export interface EnumSpec<T extends string> extends Base<T> {
  readonly kind: "enum";
  readonly values: readonly T[];
  /** Values users may reasonably try that are not available yet → a friendlier message. */
  readonly later?: Readonly<Record<string, string>>;
}

export interface ListSpec<T> extends Base<T[]> {
  readonly kind: "list";
  readonly of: AnySpec;
  readonly maxItems?: number;
}

export interface StringMapSpec extends Base<Record<string, string>> {
  readonly kind: "map";
  /** Keys must match this (e.g. environment variable names). */
  readonly keyPattern?: string;
}

export interface ObjectSpec<T> extends Base<T> {
  readonly kind: "object";
  readonly fields: Readonly<Record<string, AnySpec>>;
  /** Extra JSON Schema keywords (e.g. if/then for kind-specific keys); herd enforces them in validate.ts. */
  readonly jsonSchemaExtra?: Readonly<Record<string, unknown>>;
}

export interface NullableSpec<T> extends Base<T | null> {
  readonly kind: "nullable";
  readonly of: ObjectSpec<T>;
}

/** A string or a map (frontend.api_keys entries: a bare key, or a tenant object). */
export interface StringOrObjectSpec<T> extends Base<string | T> {
  readonly kind: "stringOrObject";
  readonly str: StringSpec;
  readonly obj: ObjectSpec<T>;
}

/** A section later releases fill: only an empty map is accepted today. */
export interface ReservedSpec extends Base<Record<string, unknown>> {
  readonly kind: "reserved";
  /** Why it is empty, for the message "the `x` section is reserved (…)": "… arrives in a later release". */
  readonly arrives: string;
}

// The union every walker switches on; `any` here is where the phantom types are erased.
export type AnySpec =
  | StringSpec
  | NumberSpec
  | BoolSpec
  | EnumSpec<string>
  | ListSpec<any>
  | StringMapSpec
  | ObjectSpec<any>
  | NullableSpec<any>
  | StringOrObjectSpec<any>
  | ReservedSpec;

export type Infer<S> = S extends Base<infer T> ? T : never;

type Opts<S> = Omit<S, "kind" | "doc" | "default" | "_type">;

export const str = (doc: string, dflt?: Default<string>, opts: Opts<StringSpec> = {}): StringSpec => ({
  kind: "string",
  doc,
  ...(dflt === undefined ? {} : { default: dflt }),
  ...opts,
});

export const int = (doc: string, dflt?: number, opts: Opts<NumberSpec> = {}): NumberSpec => ({
  kind: "int",
  doc,
  ...(dflt === undefined ? {} : { default: dflt }),
  ...opts,
});

export const num = (doc: string, dflt?: number, opts: Opts<NumberSpec> = {}): NumberSpec => ({
  kind: "number",
  doc,
  ...(dflt === undefined ? {} : { default: dflt }),
  ...opts,
});

/** Durations are integers ≥ 0 in milliseconds (the key ends in `_ms`). */
export const ms = (doc: string, dflt: number, max = 86_400_000): NumberSpec => int(doc, dflt, { min: 0, max });

export const bool = (doc: string, dflt?: boolean): BoolSpec => ({
  kind: "bool",
  doc,
  ...(dflt === undefined ? {} : { default: dflt }),
});

export const oneOf = <T extends string>(
  values: readonly T[],
  doc: string,
  dflt?: T,
  later?: Record<string, string>,
): EnumSpec<T> => ({
  kind: "enum",
  values,
  doc,
  ...(dflt === undefined ? {} : { default: dflt }),
  ...(later ? { later } : {}),
});

export const list = <S extends AnySpec>(
  of: S,
  doc: string,
  dflt?: Default<Infer<S>[]>,
  maxItems?: number,
): ListSpec<Infer<S>> => ({
  kind: "list",
  of,
  doc,
  ...(dflt === undefined ? {} : { default: dflt }),
  ...(maxItems === undefined ? {} : { maxItems }),
});

export const strMap = (doc: string, keyPattern?: string): StringMapSpec => ({
  kind: "map",
  doc,
  default: {},
  ...(keyPattern ? { keyPattern } : {}),
});

/** An object whose missing keys take their defaults; an absent object is built from those defaults. */
export const obj = <F extends Record<string, AnySpec>>(
  doc: string,
  fields: F,
  extra?: Record<string, unknown>,
): ObjectSpec<{ -readonly [K in keyof F]: Infer<F[K]> }> => ({
  kind: "object",
  doc,
  fields,
  ...(extra ? { jsonSchemaExtra: extra } : {}),
});

export const nullable = <T>(of: ObjectSpec<T>, doc: string): NullableSpec<T> => ({
  kind: "nullable",
  of,
  doc,
  default: null,
});

export const strOrObj = <T>(str: StringSpec, obj: ObjectSpec<T>, doc: string): StringOrObjectSpec<T> => ({ kind: "stringOrObject", str, obj, doc });

export const reserved = (doc: string, arrives: string): ReservedSpec => ({
  kind: "reserved",
  doc,
  arrives,
  default: {},
});

export function resolveDefault<T>(d: Default<T>, env: DefaultsEnv): T {
  return typeof d === "function" ? (d as (env: DefaultsEnv) => T)(env) : structuredClone(d);
}
