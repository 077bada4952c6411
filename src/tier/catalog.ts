// The catalog: one SQLite database (bun:sqlite, WAL, synchronous=NORMAL, one writer: this process)
// listing every object: key, tier, location, size, charged bytes, CRC-32, created, last access, hits,
// model. Committed rows survive kill -9 (WAL frames are in the page cache); the data they point at
// was written before the commit, so a row never points at a partial object. Times are the tier's
// logical milliseconds (see tier.ts), monotonic across restarts. The tier groups its writes into one
// open transaction (`begin`/`commit`, group commit: group-commit.ts); reads on this connection see them.
// Inside that group, row writes wait in `pending` (one entry per key, its latest row or its deletion;
// ≤ PENDING_MAX) and reach SQLite at the commit, or before any query that scans rows (coldest, keys,
// rows...): a key replaced several times in a group is written once, and a put's look-up of the
// key's previous row is a map hit when the group already wrote it. What a crash loses is unchanged:
// the open group, whether its rows were still pending or in SQLite's uncommitted transaction.

import { Database, type SQLQueryBindings, type Statement } from "bun:sqlite";
import type { Candidate } from "./policy.ts";
import type { TierName } from "./medium.ts";

export interface Row {
  key: string;
  tier: TierName;
  loc: string;
  size: number;
  charged: number;
  /** CRC-32 of the bytes, or CRC_UNKNOWN for a CPU object not yet checksummed (tier.ts, README "Invariants"). */
  crc: number;
  created_ms: number;
  access_ms: number;
  hits: number;
  model: string;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS objects (
  key TEXT PRIMARY KEY, tier TEXT NOT NULL, loc TEXT NOT NULL, size INTEGER NOT NULL,
  charged INTEGER NOT NULL, crc INTEGER NOT NULL, created_ms REAL NOT NULL, access_ms REAL NOT NULL,
  hits INTEGER NOT NULL, model TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_cold ON objects (tier, access_ms);
CREATE INDEX IF NOT EXISTS objects_model_cold ON objects (model, access_ms);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
`;

const TOUCH_BATCH = 256;
/** Row writes held for the open group before they go to SQLite anyway (inside the same transaction). */
const PENDING_MAX = 1024;

/** `crc` of an object whose CRC-32 was never computed: CPU objects get one only when their bytes
 * leave shared memory (demotion to SSD, a peer fetch). CRC-32 values are 0..2^32-1. */
export const CRC_UNKNOWN = -1;

export class Catalog {
  readonly db: Database;
  private readonly touches = new Map<string, { at: number; hits: number }>();
  /** Rows written (null: deleted) in the open group and not yet in SQLite; only while `group`. */
  private readonly pending = new Map<string, Row | null>();
  private group = false;
  private readonly q: {
    get: Statement<Row, [string]>;
    put: Statement<unknown, SQLQueryBindings[]>;
    move: Statement<unknown, [string, string, number, number, string]>;
    touch: Statement<unknown, [number, number, string]>;
    del: Statement<unknown, [string]>;
    cold: Statement<Row, [string, number]>;
    coldModel: Statement<Row, [string, number]>;
    keys: Statement<{ key: string }, [number]>;
    metaGet: Statement<{ v: string }, [string]>;
    metaSet: Statement<unknown, [string, string]>;
  };

  constructor(path: string) {
    this.db = new Database(path, { create: true, strict: true });
    // synchronous=NORMAL in WAL mode: commits survive a process crash (kill -9) without an fsync each;
    // a larger autocheckpoint makes the checkpoint fsyncs rarer.
    this.db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000; PRAGMA wal_autocheckpoint = 10000;");
    // Lookups hit random keys: with SQLite's default 2 MB page cache a 10M-object catalog (~1.5 GB)
    // is read through syscalls page by page; a 64 MiB cache plus mmap reads keep the hot b-tree levels.
    this.db.exec("PRAGMA cache_size = -65536; PRAGMA mmap_size = 1073741824;");
    this.db.exec(SCHEMA);
    const p = <R, A extends SQLQueryBindings[]>(sql: string) => this.db.prepare<R, A>(sql);
    this.q = {
      get: p("SELECT * FROM objects WHERE key = ?"),
      put: p(
        "INSERT OR REPLACE INTO objects (key, tier, loc, size, charged, crc, created_ms, access_ms, hits, model) VALUES (?,?,?,?,?,?,?,?,?,?)",
      ),
      move: p("UPDATE objects SET tier = ?, loc = ?, charged = ?, crc = ? WHERE key = ?"),
      touch: p("UPDATE objects SET access_ms = ?, hits = hits + ? WHERE key = ?"),
      del: p("DELETE FROM objects WHERE key = ?"),
      cold: p("SELECT * FROM objects WHERE tier = ? ORDER BY access_ms LIMIT ?"),
      coldModel: p("SELECT * FROM objects WHERE model = ? ORDER BY access_ms LIMIT ?"),
      keys: p("SELECT key FROM objects ORDER BY key LIMIT ?"),
      metaGet: p("SELECT v FROM meta WHERE k = ?"),
      metaSet: p("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)"),
    };
  }

  get(key: string): Row | undefined {
    const r = this.stored(key);
    const t = r && this.touches.get(key);
    return t ? { ...r, access_ms: t.at, hits: r.hits + t.hits } : r;
  }

  put(r: Row): void {
    this.touches.delete(r.key);
    if (this.group) return this.hold(r.key, r);
    this.write(r);
  }

  move(key: string, tier: TierName, loc: string, charged: number, crc: number): void {
    if (!this.group) return void this.q.move.run(tier, loc, charged, crc, key);
    const r = this.stored(key);
    if (r) this.hold(key, { ...r, tier, loc, charged, crc });
  }

  /** The row as written (pending or in SQLite), without the deferred touches. */
  private stored(key: string): Row | undefined {
    const p = this.pending.get(key);
    if (p !== undefined) return p ?? undefined;
    return this.q.get.get(key) ?? undefined;
  }

  private hold(key: string, r: Row | null): void {
    this.pending.delete(key); // re-inserted last: Map order is write order
    this.pending.set(key, r);
    if (this.pending.size >= PENDING_MAX) this.flushPending();
  }

  private write(r: Row): void {
    this.q.put.run(r.key, r.tier, r.loc, r.size, r.charged, r.crc, r.created_ms, r.access_ms, r.hits, r.model);
  }

  /** The open group's pending rows into SQLite (same transaction), before a query that scans rows. */
  private flushPending(): void {
    if (this.pending.size === 0) return;
    for (const [key, r] of this.pending) {
      if (r) this.write(r);
      else this.q.del.run(key);
    }
    this.pending.clear();
  }

  /**
   * Record a read. Deferred: reads only reorder eviction, so they are written in batches (every
   * TOUCH_BATCH reads, and before anything that orders by access time or reads hits). A crash loses
   * at most one batch of recency, never an object.
   */
  touch(key: string, nowMs: number): void {
    const p = this.touches.get(key);
    this.touches.set(key, { at: nowMs, hits: (p?.hits ?? 0) + 1 });
    if (this.touches.size >= TOUCH_BATCH) this.flushTouches();
  }

  flushTouches(): void {
    this.flushPending(); // a touch updates a row SQLite must already hold
    if (this.touches.size === 0) return;
    const t = [...this.touches];
    this.touches.clear();
    this.tx(() => {
      for (const [key, { at, hits }] of t) this.q.touch.run(at, hits, key);
    });
  }

  delete(key: string): void {
    this.touches.delete(key);
    if (this.group) return this.hold(key, null);
    this.q.del.run(key);
  }

  /** The `limit` least recently used objects of a tier, coldest first (an index range scan). */
  coldest(tier: TierName, limit: number): Candidate[] {
    this.flushTouches();
    return this.q.cold.all(tier, limit).map(toCandidate);
  }

  coldestOfModel(model: string, limit: number): Row[] {
    this.flushTouches();
    return this.q.coldModel.all(model, limit);
  }

  keys(limit: number): string[] {
    this.flushPending();
    return this.q.keys.all(limit).map((r) => r.key);
  }

  /** Every row (recovery only). */
  *rows(): Generator<Row> {
    this.flushTouches();
    yield* this.db.prepare<Row, []>("SELECT * FROM objects").iterate();
  }

  count(): number {
    this.flushPending();
    return this.db.prepare<{ n: number }, []>("SELECT COUNT(*) AS n FROM objects").get()!.n;
  }

  maxAccessMs(): number {
    this.flushTouches();
    return this.db.prepare<{ m: number | null }, []>("SELECT MAX(access_ms) AS m FROM objects").get()?.m ?? 0;
  }

  meta(k: string): string | undefined {
    return this.q.metaGet.get(k)?.v;
  }

  setMeta(k: string, v: string): void {
    this.q.metaSet.run(k, v);
  }

  /** Inside an open transaction, `tx` nests as a savepoint (bun:sqlite) and nothing is durable until `commit`. */
  tx<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }

  /** Open the group-commit transaction (tier.ts); a no-op when one is open. */
  begin(): void {
    if (this.db.inTransaction) return;
    this.db.exec("BEGIN IMMEDIATE");
    this.group = true;
  }

  get inTransaction(): boolean {
    return this.db.inTransaction;
  }

  /** Commit the open transaction, if any (with the deferred touches). */
  commit(): void {
    if (!this.db.inTransaction) return;
    this.flushTouches();
    this.db.exec("COMMIT");
    this.group = false;
  }

  close(): void {
    this.flushTouches();
    this.commit();
    this.db.close();
  }
}

function toCandidate(r: Row): Candidate {
  return { key: r.key, bytes: r.charged, createdMs: r.created_ms, accessMs: r.access_ms, hits: r.hits };
}
