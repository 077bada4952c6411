// Shared by the packaging tests: process helpers, a git snapshot of the tree to build from, small
// stand-in releases, and /proc readers (processes running a binary, their listening sockets).
import { expect } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
export { freePort } from "../helpers/ports.ts";

export const REPO = resolve(import.meta.dir, "../..");
export const INSTALL = join(REPO, "scripts/install.sh");
export const BUILD_SRC = join(REPO, "scripts/build.sh");
export const UNIT = join(REPO, "systemd/herd.service");
export const VERSION: string = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")).version;
export const ARCH = process.arch === "arm64" ? "arm64" : "x64";

export interface Run {
  code: number;
  out: string;
  err: string;
}

export function run(argv: string[], env: Record<string, string> = {}, timeoutMs = 60_000, cwd = REPO): Run {
  const r = spawnSync(argv[0]!, argv.slice(1), {
    cwd,
    env: { ...process.env, ...env },
    encoding: "utf8",
    timeout: timeoutMs,
    maxBuffer: 16 << 20,
  });
  return { code: r.status ?? -1, out: r.stdout ?? "", err: r.stderr ?? "" };
}

export const sh = (script: string, args: string[], env: Record<string, string> = {}) => run(["sh", script, ...args], env);
export const sha256 = (path: string) => new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex");
export const inode = (path: string) => statSync(path).ino;
export const mode = (path: string) => statSync(path).mode & 0o7777;

/** Every path under `dir`, relative, sorted (directories end in /): the whole footprint of an install. */
export function tree(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      out.push(e.isDirectory() ? p + "/" : p);
      if (e.isDirectory()) walk(p);
    }
  };
  walk("");
  return out.sort();
}

/**
 * Copies the working tree (tracked and untracked, not ignored) to `dest` and commits it in a new git
 * repository dated `epoch`; node_modules is linked in after the commit. Returns the short commit.
 * build.sh then embeds a known commit and SOURCE_DATE_EPOCH, and two builds see the same sources
 * even while others commit to this tree (in CI the snapshot equals the clean clone).
 */
export function snapshot(dest: string, epoch: number): string {
  const ls = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]);
  if (ls.code !== 0) throw new Error(`the packaging tests need a git checkout: ${ls.err}`);
  for (const f of ls.out.split("\0")) {
    if (f === "" || !existsSync(join(REPO, f)) || statSync(join(REPO, f)).isDirectory()) continue;
    mkdirSync(dirname(join(dest, f)), { recursive: true });
    cpSync(join(REPO, f), join(dest, f));
  }
  const date = `${epoch} +0000`;
  const git = (...args: string[]) => {
    const who = ["-c", "user.name=herd-test", "-c", "user.email=test@herd.invalid", "-c", "commit.gpgsign=false"];
    const r = run(["git", ...who, ...args], { GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date }, 30_000, dest);
    if (r.code !== 0) throw new Error(`git ${args.join(" ")}: ${r.err}`);
    return r.out.trim();
  };
  git("init", "-q");
  git("add", "-A");
  git("commit", "-q", "-m", "snapshot");
  symlinkSync(join(REPO, "node_modules"), join(dest, "node_modules"));
  return git("rev-parse", "--short=12", "HEAD");
}

/**
 * A release directory in build.sh's layout whose "binary" is a script printing `herd VERSION
 * (commit fake)`. It keeps upgrade tests fast; the installer treats it exactly like a compiled one
 * (checksum, `herd version`, atomic rename).
 */
export function fakeRelease(version: string, parent: string): string {
  const dir = join(parent, `release-${version}`);
  const name = `herd-${version}-linux-${ARCH}`;
  const stage = join(dir, "stage", name);
  mkdirSync(join(stage, "config"), { recursive: true });
  mkdirSync(join(stage, "systemd"), { recursive: true });
  writeFileSync(join(stage, "herd"), `#!/bin/sh\necho "herd ${version} (commit fake)"\n`);
  chmodSync(join(stage, "herd"), 0o755);
  cpSync(join(REPO, "config/herd.example.yaml"), join(stage, "config/herd.example.yaml"));
  cpSync(UNIT, join(stage, "systemd/herd.service"));
  cpSync(join(REPO, "LICENSE"), join(stage, "LICENSE"));
  cpSync(join(REPO, "README.md"), join(stage, "README.md"));
  expect(run(["tar", "-czf", join(dir, `${name}.tar.gz`), "-C", join(dir, "stage"), name]).code).toBe(0);
  writeFileSync(join(dir, `${name}.tar.gz.sha256`), `${sha256(join(dir, `${name}.tar.gz`))}  ${name}.tar.gz\n`);
  writeFileSync(join(dir, "VERSION"), `${version}\n`);
  return dir;
}

// Binds a unix datagram socket (what systemd passes as NOTIFY_SOCKET) and prints each line received.
export const NOTIFY_RECEIVER = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(60)
try:
    while True:
        for line in s.recv(65536).decode(errors="replace").split("\\n"):
            if line:
                print(line, flush=True)
except socket.timeout:
    pass
`;

export interface Listener {
  pid: number;
  address: string;
  loopback: boolean;
}

/** TCP sockets in LISTEN state owned by `pids`, from /proc (no dependency on ss/netstat). */
export function listeners(pids: number[]): Listener[] {
  const byInode = new Map<string, { address: string; loopback: boolean }>();
  for (const [file, v6] of [["/proc/net/tcp", false], ["/proc/net/tcp6", true]] as const) {
    if (!existsSync(file)) continue;
    for (const line of readFileSync(file, "utf8").split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== "0A") continue; // 0A = LISTEN
      const [hex, portHex] = f[1]!.split(":") as [string, string];
      const port = parseInt(portHex, 16);
      let address: string;
      let loopback: boolean;
      if (!v6) {
        const b = hex.match(/../g)!.map((x) => parseInt(x, 16)).reverse(); // little-endian
        address = `${b.join(".")}:${port}`;
        loopback = b[0] === 127;
      } else {
        // Four 32-bit words, each little-endian.
        const b = hex.match(/.{8}/g)!.flatMap((w) => w.match(/../g)!.map((x) => parseInt(x, 16)).reverse());
        const v4mapped = b.slice(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff;
        address = `[${hex}]:${port}`;
        loopback = v4mapped ? b[12] === 127 : b.slice(0, 15).every((x) => x === 0) && b[15] === 1;
      }
      byInode.set(f[9]!, { address, loopback });
    }
  }
  const out: Listener[] = [];
  for (const pid of pids) {
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        const l = m ? byInode.get(m[1]!) : undefined;
        if (l) out.push({ pid, ...l });
      } catch {
        // closed meanwhile
      }
    }
  }
  return out;
}

/** PIDs whose executable is `bin` (herd re-executes itself for sim engines). */
export function processesRunning(bin: string): number[] {
  const pids: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readlinkSync(`/proc/${d}/exe`) === bin) pids.push(Number(d));
    } catch {
      // gone, or not ours to read
    }
  }
  return pids;
}
