// The release path for real: build.sh compiles the binary and tarball once (beforeAll; the compile and
// gzip are the slow part), then install.sh installs, re-runs, upgrades, refuses a bad checksum and
// uninstalls into temporary roots (--root), the system path runs inside a private mount namespace,
// and the compiled daemon serves a chat completion and drains on SIGTERM. Nothing on the machine
// running the tests is touched.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { PYTHON, peer, probe } from "../helpers/peers.ts";
import { ARCH, INSTALL, NOTIFY_RECEIVER, REPO, VERSION, fakeRelease, freePort, inode, listeners, mode, processesRunning, run, sh, sha256, snapshot, tree, type Run } from "./helpers.ts";

const NAME = `herd-${VERSION}-linux-${ARCH}`;
const work = mkdtempSync(join(tmpdir(), "herd-packaging-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const SNAPSHOT = join(work, "tree");
const BUILD = join(SNAPSHOT, "scripts/build.sh");
const SNAPSHOT_EPOCH = 1_700_000_000;

describe("release", () => {
  const dist = join(work, "dist");
  let build: Run;
  let commit = "";

  beforeAll(() => {
    commit = snapshot(SNAPSHOT, SNAPSHOT_EPOCH);
    build = sh(BUILD, ["--arch", "host", "--out", dist], { HERD_GZIP_LEVEL: "1" });
    if (build.code !== 0) throw new Error(`build.sh failed (${build.code}):\n${build.err}`);
  }, 90_000);

  test("build.sh writes the binary, tarball, checksums, VERSION and install.sh", () => {
    for (const f of ["herd", "herd.sha256", `linux-${ARCH}/herd`, `linux-${ARCH}/herd.sha256`, `${NAME}.tar.gz`, `${NAME}.tar.gz.sha256`, "VERSION", "install.sh"]) {
      expect(existsSync(join(dist, f))).toBe(true);
    }
    expect(readFileSync(join(dist, "VERSION"), "utf8")).toBe(`${VERSION}\n`);
    expect(readFileSync(join(dist, "install.sh"), "utf8")).toBe(readFileSync(join(SNAPSHOT, "scripts/install.sh"), "utf8"));
    expect(existsSync(join(dist, `linux-${ARCH}/herd.map`))).toBe(false);
    // Each .sha256 is in `sha256sum -c` format next to its file.
    for (const d of [dist, join(dist, `linux-${ARCH}`)]) {
      const sums = readdirSync(d).filter((f) => f.endsWith(".sha256"));
      for (const s of sums) {
        const r = spawnSync("sha256sum", ["-c", s], { cwd: d, encoding: "utf8" });
        expect(r.status).toBe(0);
      }
    }
    expect(sha256(join(dist, "herd"))).toBe(sha256(join(dist, `linux-${ARCH}/herd`)));
  }, 30_000);

  test("tarball: fixed layout, owner 0:0, modes, mtime = commit time", () => {
    const r = run(["tar", "--numeric-owner", "--full-time", "-tvzf", join(dist, `${NAME}.tar.gz`)]);
    expect(r.code).toBe(0);
    const rows = r.out.trim().split("\n").map((l) => l.split(/\s+/));
    const names = rows.map((c) => c[5]);
    expect(names).toEqual([
      `${NAME}/`,
      `${NAME}/LICENSE`,
      `${NAME}/README.md`,
      `${NAME}/config/`,
      `${NAME}/config/herd.example.yaml`,
      `${NAME}/herd`,
      `${NAME}/systemd/`,
      `${NAME}/systemd/herd.service`,
    ]);
    for (const c of rows) expect(c[1]).toBe("0/0");
    expect(rows.find((c) => c[5] === `${NAME}/herd`)?.[0]).toBe("-rwxr-xr-x");
    expect(rows.find((c) => c[5] === `${NAME}/LICENSE`)?.[0]).toBe("-rw-r--r--");
    for (const c of rows) expect(Date.parse(`${c[3]}T${c[4]}Z`) / 1000).toBe(SNAPSHOT_EPOCH);
  }, 30_000);

  test("a second build from the same commit is byte-identical", () => {
    const again = join(work, "dist-again");
    const r = sh(BUILD, ["--arch", "host", "--out", again], { HERD_GZIP_LEVEL: "1" });
    expect(r.code).toBe(0);
    expect(sha256(join(again, `${NAME}.tar.gz`))).toBe(sha256(join(dist, `${NAME}.tar.gz`)));
    expect(readFileSync(join(again, `${NAME}.tar.gz.sha256`), "utf8")).toBe(readFileSync(join(dist, `${NAME}.tar.gz.sha256`), "utf8"));
    rmSync(again, { recursive: true, force: true });
  }, 60_000);

  test("herd version prints the package version and the embedded commit", () => {
    const r = run([join(dist, "herd"), "version"]);
    expect(r.code).toBe(0);
    expect(commit).toMatch(/^[0-9a-f]{12}$/);
    expect(r.out).toContain(`herd ${VERSION} (commit ${commit},`);
    expect(build.err).toContain(`commit ${commit}, bun ${Bun.version}, SOURCE_DATE_EPOCH=${SNAPSHOT_EPOCH}`);
  }, 30_000);

  describe("install.sh into a temporary root", () => {
    const root = join(work, "root");
    const url = () => `file://${dist}`;
    const p = (rel: string) => join(root, rel);
    const installed = [
      "etc/",
      "etc/herd/",
      "etc/herd/herd.example.yaml",
      "etc/herd/herd.yaml",
      "etc/systemd/",
      "etc/systemd/system/",
      "etc/systemd/system/herd.service",
      "usr/",
      "usr/local/",
      "usr/local/bin/",
      "usr/local/bin/herd",
      "usr/local/share/",
      "usr/local/share/doc/",
      "usr/local/share/doc/herd/",
      "usr/local/share/doc/herd/LICENSE",
      "usr/local/share/doc/herd/README.md",
      "var/",
      "var/lib/",
      "var/lib/herd/",
    ];

    test("fresh install", () => {
      const r = sh(INSTALL, ["--base-url", url(), "--root", root]);
      expect(r.err).toBe("");
      expect(r.code).toBe(0);
      expect(tree(root)).toEqual(installed.slice().sort());
      expect(sha256(p("usr/local/bin/herd"))).toBe(sha256(join(dist, "herd")));
      expect(mode(p("usr/local/bin/herd"))).toBe(0o755);
      expect(mode(p("etc/herd"))).toBe(0o750);
      expect(mode(p("etc/herd/herd.yaml"))).toBe(0o640);
      expect(mode(p("var/lib/herd"))).toBe(0o750);
      expect(readFileSync(p("etc/systemd/system/herd.service"), "utf8")).toBe(readFileSync(join(SNAPSHOT, "systemd/herd.service"), "utf8"));
      const example = readFileSync(join(SNAPSHOT, "config/herd.example.yaml"), "utf8");
      expect(readFileSync(p("etc/herd/herd.example.yaml"), "utf8")).toBe(example);
      // The fresh config is the example with its state under the unit's StateDirectory, not /etc.
      const conf = readFileSync(p("etc/herd/herd.yaml"), "utf8");
      expect(conf).not.toMatch(/^\s*data_dir:\s*\.\//m);
      expect(conf.split("\n").length).toBe(example.split("\n").length);
      expect(r.out).toContain("not creating the herd user");
      expect(r.out).toContain("systemd not touched");
      expect(r.out).toContain("systemctl enable --now herd");
      expect(r.out).toContain(`installed ${p("usr/local/bin/herd")} (herd ${VERSION} `);
      cpSync(p("etc/herd/herd.yaml"), join(work, "installed-herd.yaml"));
    }, 30_000);

    test("the installed config passes herd config check", () => {
      const r = run([p("usr/local/bin/herd"), "config", "check", p("etc/herd/herd.yaml")]);
      expect(r.err).not.toContain("error");
      expect(r.code).toBe(0);
      expect(r.out).toContain("data_dir: /var/lib/herd");
      expect(r.out).toContain(`name: ${hostname()}`); // not the example's fixed node name
    }, 30_000);

    test("re-run is idempotent and keeps an edited config", () => {
      const conf = p("etc/herd/herd.yaml");
      writeFileSync(conf, readFileSync(conf, "utf8") + "# edited by the operator\n");
      const before = readFileSync(conf, "utf8");
      const binIno = inode(p("usr/local/bin/herd"));
      const unitIno = inode(p("etc/systemd/system/herd.service"));
      const r = run(["sh", INSTALL], { HERD_BASE_URL: url(), HERD_ROOT: root });
      expect(r.code).toBe(0);
      expect(readFileSync(conf, "utf8")).toBe(before);
      expect(inode(p("usr/local/bin/herd"))).toBe(binIno); // untouched, not rewritten
      expect(inode(p("etc/systemd/system/herd.service"))).toBe(unitIno);
      expect(r.out).toContain("is already herd");
      expect(r.out).toContain(`kept existing ${conf}`);
      expect(tree(root)).toEqual(installed.slice().sort());
    }, 30_000);

    test("upgrade replaces the binary atomically and keeps the config", () => {
      const rel = fakeRelease("9.9.9", work);
      writeFileSync(join(rel, "VERSION"), "9.9.8\n"); // --version wins over the release's VERSION
      const conf = readFileSync(p("etc/herd/herd.yaml"), "utf8");
      const oldIno = inode(p("usr/local/bin/herd"));
      const r = sh(INSTALL, ["--base-url", `file://${rel}`, "--version", "9.9.9", "--root", root]);
      expect(r.err).toBe("");
      expect(r.code).toBe(0);
      expect(r.out).toContain(`upgraded ${p("usr/local/bin/herd")}: herd ${VERSION} `);
      expect(r.out).toContain("-> herd 9.9.9 (commit fake)");
      expect(run([p("usr/local/bin/herd"), "version"]).out).toBe("herd 9.9.9 (commit fake)\n");
      expect(inode(p("usr/local/bin/herd"))).not.toBe(oldIno); // a new file renamed over the old
      expect(readFileSync(p("etc/herd/herd.yaml"), "utf8")).toBe(conf);
      expect(tree(root)).toEqual(installed.slice().sort()); // no *.new.* leftovers
    }, 30_000);

    test("a bad checksum is refused and nothing is installed or changed", () => {
      const bad = join(work, "bad");
      mkdirSync(bad, { recursive: true });
      cpSync(join(dist, "VERSION"), join(bad, "VERSION"));
      // The real tarball with someone else's checksum: what a corrupted or swapped download looks like.
      symlinkSync(join(dist, `${NAME}.tar.gz`), join(bad, `${NAME}.tar.gz`));
      const wrong = sha256(INSTALL);
      writeFileSync(join(bad, `${NAME}.tar.gz.sha256`), `${wrong}  ${NAME}.tar.gz\n`);

      const fresh = join(work, "root-bad");
      const r1 = sh(INSTALL, ["--base-url", `file://${bad}`, "--root", fresh]);
      expect(r1.code).not.toBe(0);
      expect(r1.err).toContain(`checksum mismatch for ${NAME}.tar.gz: expected ${wrong}`);
      expect(r1.err).toContain("nothing was installed");
      expect(tree(fresh)).toEqual([]);

      const binSum = sha256(p("usr/local/bin/herd")); // the 9.9.9 stand-in from the upgrade test
      const before = tree(root);
      const r2 = sh(INSTALL, ["--base-url", bad, "--root", root]); // a plain path works like file://
      expect(r2.code).not.toBe(0);
      expect(sha256(p("usr/local/bin/herd"))).toBe(binSum);
      expect(tree(root)).toEqual(before);

      writeFileSync(join(bad, `${NAME}.tar.gz.sha256`), "not a checksum\n");
      const r3 = sh(INSTALL, ["--base-url", bad, "--root", fresh]);
      expect(r3.code).not.toBe(0);
      expect(r3.err).toContain("does not hold a SHA-256");
    }, 30_000);

    test("clear errors and non-zero exits for bad use", () => {
      const cases: [string[], string][] = [
        [["--root", join(work, "r-x"), "--purge"], "--purge only goes with --uninstall"],
        [["--root", join(work, "r-x"), "--bogus"], "unknown option '--bogus'"],
        [["--root", join(work, "r-x")], "no release URL is configured yet"],
        [["--root", join(work, "r-x"), "--base-url", "ftp://x"], "unsupported URL"],
        [["--root", join(work, "r-x"), "--base-url", url(), "--arch", "mips"], "unsupported architecture 'mips'"],
        [["--root", join(work, "r-x"), "--base-url", url(), "--version", "0.0.0-missing"], "not found"],
      ];
      for (const [args, msg] of cases) {
        const r = run(["sh", INSTALL, ...args], { HERD_BASE_URL: "" });
        expect(r.code).not.toBe(0);
        expect(r.err).toContain(msg);
      }
      expect(tree(join(work, "r-x"))).toEqual([]);
      const help = sh(INSTALL, ["--help"]);
      expect(help.code).toBe(0);
      expect(help.out).toContain("--uninstall     remove the binary");
      expect(help.out).not.toContain("set -eu");
    }, 30_000);

    test("systemd handling: reload always, restart only when it was running and something changed", () => {
      // A stand-in systemctl (HERD_SYSTEMCTL) records its calls; `is-active` answers from a flag file.
      const svcRoot = join(work, "root-svc");
      const log = join(work, "systemctl.log");
      const activeFlag = join(work, "systemctl.active");
      const fake = join(work, "systemctl");
      writeFileSync(fake, `#!/bin/sh\necho "$*" >> '${log}'\nif [ "$1" = is-active ]; then [ -f '${activeFlag}' ]; exit $?; fi\nexit 0\n`);
      chmodSync(fake, 0o755);
      const a = fakeRelease("9.9.9", work);
      const b = fakeRelease("9.9.10", work);
      const install = (rel: string, ...extra: string[]) => {
        writeFileSync(log, "");
        const r = sh(INSTALL, ["--base-url", rel, "--root", svcRoot, ...extra], { HERD_SYSTEMCTL: fake });
        expect(r.code).toBe(0);
        return { out: r.out, calls: readFileSync(log, "utf8").trim().split("\n") };
      };
      const reload = "daemon-reload";
      const isActive = "is-active --quiet herd.service";
      const restart = "restart herd.service";

      expect(install(a).calls).toEqual([isActive, reload]); // fresh, not running: never started by the installer
      writeFileSync(activeFlag, "");
      expect(install(a).calls).toEqual([isActive, reload]); // running, nothing changed: no restart
      const up = install(b); // running and upgraded: restart
      expect(up.calls).toEqual([isActive, reload, restart]);
      expect(up.out).toContain("has been restarted");
      rmSync(activeFlag);
      expect(install(a).calls).toEqual([isActive, reload]); // stopped and changed: stays stopped

      writeFileSync(log, "");
      expect(sh(INSTALL, ["--uninstall", "--root", svcRoot], { HERD_SYSTEMCTL: fake }).code).toBe(0);
      expect(readFileSync(log, "utf8").trim().split("\n")).toEqual(["disable --now herd.service", reload]);
    }, 30_000);

    test.skipIf(process.getuid?.() === 0 && !peer("setpriv", ["setpriv", "--version"]))(
      "piped to sh as a non-root user: refuses a system install, installs under --root without a user",
      () => {
        // Another directory: `work` is private to root. The script comes on stdin, as from curl.
        const pub = mkdtempSync(join(tmpdir(), "herd-packaging-user-"));
        try {
          chmodSync(pub, 0o755);
          const rel = fakeRelease("9.9.9", pub);
          const userRoot = join(pub, "root");
          mkdirSync(userRoot);
          const asUser = process.getuid?.() === 0 ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : [];
          if (asUser.length) chownSync(userRoot, 65534, 65534);
          const script = readFileSync(INSTALL);
          const pipe = (args: string[]) => {
            const r = spawnSync(asUser[0] ?? "sh", [...asUser.slice(1), ...(asUser.length ? ["sh"] : []), "-s", "--", ...args], {
              input: script,
              encoding: "utf8",
              env: { ...process.env, HERD_ROOT: "", HERD_SYSTEMCTL: "" },
            });
            return { code: r.status, out: r.stdout, err: r.stderr };
          };
          const sys = pipe(["--base-url", rel]);
          expect(sys.code).not.toBe(0);
          expect(sys.err).toContain("run as root");
          const ok = pipe(["--base-url", rel, "--root", userRoot]);
          expect(ok.err).toBe("");
          expect(ok.code).toBe(0);
          expect(ok.out).toContain("not creating the herd user");
          expect(readFileSync(join(userRoot, "usr/local/bin/herd"), "utf8")).toContain("herd 9.9.9");
        } finally {
          rmSync(pub, { recursive: true, force: true });
        }
      },
      30_000,
    );

    // The real system path (no --root): user and groups, ownership, then herd started the way the
    // unit starts it (User=herd, SupplementaryGroups=video render, STATE_DIRECTORY, WorkingDirectory). It runs in a private mount
    // namespace with overlays over /etc, /usr/local and /var/lib, so the machine is not touched.
    const canIsolate =
      process.getuid?.() === 0 &&
      probe(["unshare", "-m", "--propagation", "private", "true"]) &&
      readFileSync("/proc/filesystems", "utf8").includes("overlay") &&
      probe(["setpriv", "--version"]);
    if (!canIsolate) console.error("skip: system install test needs root, unshare -m and overlayfs");
    test.skipIf(!canIsolate)("system install as root: herd user, ownership, service-like start, purge", async () => {
      const port = await freePort();
      const scratch = join(work, "ns");
      mkdirSync(scratch);
      const script = `
set -e
mount -t tmpfs tmpfs '${scratch}'
for d in /etc /usr/local /var/lib; do
  n=$(echo "$d" | tr / _)
  mkdir -p '${scratch}'/u$n '${scratch}'/w$n
  mount -t overlay overlay -o lowerdir=$d,upperdir='${scratch}'/u$n,workdir='${scratch}'/w$n $d
done
sh '${INSTALL}' --base-url 'file://${dist}' >'${scratch}/install.out'
echo "USER $(getent passwd herd)"
echo "GROUPS $(id -Gn herd)"
getent group video render | cut -d: -f1 | sed 's/^/GPUGROUP /'
stat -c 'STAT %U:%G %a %n' /usr/local/bin/herd /etc/herd /etc/herd/herd.yaml /var/lib/herd /etc/systemd/system/herd.service
cd /var/lib/herd
STATE_DIRECTORY=/var/lib/herd setpriv --reuid=herd --regid=herd --groups video,render /usr/local/bin/herd run --config /etc/herd/herd.yaml --listen 127.0.0.1:${port} 2>'${scratch}/herd.err' &
pid=$!
'${PYTHON}' - $pid <<'PY'
import os, sys, time, urllib.request
code = 0
for _ in range(150):
    try:  # herd still running (and not a zombie waiting for the shell)?
        if open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    except OSError:
        break
    try:
        code = urllib.request.urlopen("http://127.0.0.1:${port}/health", timeout=2).status
        if code == 200: break
    except Exception:
        time.sleep(0.2)
print("HEALTH", code)
PY
kill -TERM $pid 2>/dev/null || echo "herd had already exited"
rc=0; wait $pid || rc=$?
echo "EXIT $rc"
[ "$rc" = 0 ] || sed 's/^/HERDERR /' '${scratch}/herd.err' >&2
ls /var/lib/herd/logs >/dev/null 2>&1 && echo "LOGS written by herd"
stat -c 'LOGOWNER %U' /var/lib/herd/logs
sh '${INSTALL}' --uninstall --purge >/dev/null
getent passwd herd >/dev/null || echo "PURGED user"
[ -e /etc/herd ] || [ -e /var/lib/herd ] || echo "PURGED dirs"
`;
      const r = run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], {}, 60_000);
      if (r.code !== 0) console.error(r.err);
      expect(r.code).toBe(0);
      const lines = r.out.split("\n");
      expect(lines.find((l) => l.startsWith("USER "))).toMatch(/^USER herd:x:\d+:\d+:[^:]*:\/var\/lib\/herd:\S*(nologin|false)$/);
      expect(lines.find((l) => l.startsWith("GROUPS "))).toBe("GROUPS herd");
      // The unit's SupplementaryGroups=video render: both must exist, or systemd refuses to start.
      expect(lines.filter((l) => l.startsWith("GPUGROUP ")).sort()).toEqual(["GPUGROUP render", "GPUGROUP video"]);
      expect(lines.filter((l) => l.startsWith("STAT "))).toEqual([
        "STAT root:root 755 /usr/local/bin/herd",
        "STAT root:herd 750 /etc/herd",
        "STAT root:herd 640 /etc/herd/herd.yaml",
        "STAT herd:herd 750 /var/lib/herd",
        "STAT root:root 644 /etc/systemd/system/herd.service",
      ]);
      expect(lines).toContain("HEALTH 200"); // the herd user can read its config and write its state
      expect(lines).toContain("EXIT 0");
      expect(lines).toContain("LOGOWNER herd");
      expect(lines).toContain("PURGED user");
      expect(lines).toContain("PURGED dirs");
      expect(existsSync("/etc/herd") || run(["getent", "passwd", "herd"]).code === 0).toBe(false); // host untouched
    }, 60_000);

    test("uninstall removes what it installed and keeps config and data", () => {
      writeFileSync(p("var/lib/herd/state.db"), "state");
      const conf = readFileSync(p("etc/herd/herd.yaml"), "utf8");
      const r = sh(INSTALL, ["--uninstall", "--root", root]);
      expect(r.code).toBe(0);
      expect(tree(root)).toEqual(
        ["etc/", "etc/herd/", "etc/herd/herd.yaml", "etc/systemd/", "etc/systemd/system/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/share/", "usr/local/share/doc/", "var/", "var/lib/", "var/lib/herd/", "var/lib/herd/state.db"].sort(),
      );
      expect(readFileSync(p("etc/herd/herd.yaml"), "utf8")).toBe(conf);
      expect(r.out).toContain("--purge deletes it");
      const again = sh(INSTALL, ["--uninstall", "--root", root]);
      expect(again.code).toBe(0);
      expect(again.out).toContain("nothing to remove");
    }, 30_000);

    test("reinstall after uninstall reuses the kept config; --purge removes everything", () => {
      const conf = readFileSync(p("etc/herd/herd.yaml"), "utf8");
      const again = sh(INSTALL, ["--base-url", fakeRelease("9.9.9", work), "--root", root]); // small and fast
      expect(again.code).toBe(0);
      expect(again.out).toContain(`kept existing ${p("etc/herd/herd.yaml")}`);
      expect(readFileSync(p("etc/herd/herd.yaml"), "utf8")).toBe(conf);
      expect(tree(root)).toEqual(installed.concat("var/lib/herd/state.db").sort());
      const r = sh(INSTALL, ["--uninstall", "--purge", "--root", root]);
      expect(r.code).toBe(0);
      const left = tree(root).filter((x) => !x.endsWith("/"));
      expect(left).toEqual([]);
      expect(existsSync(p("etc/herd"))).toBe(false);
      expect(existsSync(p("var/lib/herd"))).toBe(false);
    }, 30_000);
  });

  // The compiled daemon end to end: embedded default (two sim engines), one chat completion, SIGTERM.
  const hasDaemon = existsSync(join(REPO, "src/daemon/daemon.ts"));
  if (!hasDaemon) console.error("skip: compiled-binary smoke test: src/daemon/daemon.ts does not exist yet");
  test.skipIf(!hasDaemon)("the binary serves a chat completion and stops on SIGTERM within the drain bound", async () => {
    const { defaultConfig } = await import("../../src/config/load.ts");
    const drainMs = defaultConfig().frontend.drain_timeout_ms;
    const bin = join(dist, "herd");
    const port = await freePort();
    const state = join(work, "smoke-state");
    mkdirSync(state, { recursive: true });
    // Stand-in for systemd's notify socket: the unit is Type=notify, so herd must send READY=1.
    const notifySocket = join(work, "notify.sock");
    const receiver = Bun.spawn([PYTHON, "-u", "-c", NOTIFY_RECEIVER, notifySocket], { stdout: "pipe", stderr: "inherit" });
    const receiverOut = new Response(receiver.stdout).text();
    for (let i = 0; i < 50 && !existsSync(notifySocket); i++) await Bun.sleep(50);
    const env: Record<string, string | undefined> = { ...process.env, STATE_DIRECTORY: state, NOTIFY_SOCKET: notifySocket };
    // STATE_DIRECTORY keeps the default data_dir out of /var/lib/herd when tests run as root.
    const proc = Bun.spawn([bin, "run", "--listen", `127.0.0.1:${port}`], { env, stdout: "ignore", stderr: "pipe" });
    const stderr = new Response(proc.stderr).text();
    const base = `http://127.0.0.1:${port}`;
    try {
      let reply: Response | null = null;
      const deadline = Date.now() + 30_000;
      while (Date.now() < deadline && proc.exitCode === null) {
        try {
          reply = await fetch(`${base}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "herd-sim", messages: [{ role: "user", content: "hello" }], max_tokens: 8 }),
          });
          if (reply.status === 200) break;
        } catch {
          // not listening yet
        }
        await Bun.sleep(200);
      }
      if (reply?.status !== 200) console.error(await stderr);
      expect(reply?.status).toBe(200);
      const body = (await reply!.json()) as { object: string; choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
      expect(body.object).toBe("chat.completion");
      expect(body.choices[0]!.message.content.length).toBeGreaterThan(0);
      expect(body.usage.completion_tokens).toBeGreaterThan(0);

      // Prompt preprocessing runs on tokenizer worker threads, a second entry point of the compiled
      // binary (build.sh lists it): explain tokenizes the prompt through them.
      const explain = await fetch(`${base}/admin/route/explain`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "herd-sim", messages: [{ role: "user", content: "hello from the compiled binary" }] }),
      });
      const explained = (await explain.json()) as { kv?: { prompt_tokens: number } | null };
      expect(explain.status).toBe(200);
      if (explained.kv) expect(explained.kv.prompt_tokens).toBeGreaterThan(0);

      const t0 = Date.now();
      proc.kill("SIGTERM");
      const code = await Promise.race([proc.exited, Bun.sleep(drainMs + 5_000).then(() => "timeout" as const)]);
      expect(code).toBe(0);
      expect(Date.now() - t0).toBeLessThan(drainMs);
      await Bun.sleep(200);
      expect(processesRunning(bin)).toEqual([]); // the sim engines went with it

      receiver.kill("SIGTERM");
      expect((await receiverOut).split("\n")).toContain("READY=1");
      expect(await stderr).not.toContain("worker threads failed to start");
    } finally {
      receiver.kill("SIGKILL");
      proc.kill("SIGKILL");
      for (const pid of processesRunning(bin)) process.kill(pid, "SIGKILL");
    }
  }, 60_000);

  // issue 6 "safe by default": with the installed config only the frontend may listen beyond
  // loopback, and the installed frontend is on loopback too, so every listener must be.
  test("with the installed config every listener of herd and its engines is on loopback", async () => {
    const bin = join(dist, "herd");
    const conf = join(work, "listeners.yaml");
    const state = join(work, "listeners-state");
    mkdirSync(state, { recursive: true });
    // The installed config, with its state moved out of the real /var/lib/herd.
    writeFileSync(conf, readFileSync(join(work, "installed-herd.yaml"), "utf8").replace(/^(\s*data_dir:\s*)\S+/m, `$1${state}`));
    const port = await freePort();
    const env: Record<string, string | undefined> = { ...process.env };
    delete env.NOTIFY_SOCKET;
    const proc = Bun.spawn([bin, "run", "--config", conf, "--listen", `127.0.0.1:${port}`], { env, stdout: "ignore", stderr: "pipe" });
    try {
      let ready = false;
      for (let i = 0; i < 150 && !ready && proc.exitCode === null; i++) {
        ready = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false);
        if (!ready) await Bun.sleep(200);
      }
      if (!ready) throw new Error(`herd did not become ready:\n${await new Response(proc.stderr).text()}`);
      const found = listeners(processesRunning(bin));
      expect(found.length).toBeGreaterThanOrEqual(3); // frontend + one HTTP port per engine
      expect(found.filter((l) => !l.loopback).map((l) => `${l.address} (pid ${l.pid})`)).toEqual([]);
    } finally {
      proc.kill("SIGTERM");
      await Promise.race([proc.exited, Bun.sleep(10_000)]);
      proc.kill("SIGKILL");
      for (const pid of processesRunning(bin)) process.kill(pid, "SIGKILL");
    }
  }, 60_000);
});
