// The built-in status page in a real browser: headless Chromium (Debian `chromium`, driven by
// playwright-core) loads GET / from a running `herd run` with sim engines: no console error, the
// worker ids and the leader are in the DOM, a worker drained through the admin API shows as drained
// within 2 s, the keys work, and at 390 px the page does not overflow sideways. With
// HERD_SCREENSHOTS=1 the 1280 and 390 px screenshots are written to docs/ (shown in the README).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";
import { startLiveHerd, type LiveHerd } from "./live-herd.ts";

const CHROMIUM = "/usr/bin/chromium";
const hasChromium = () => peer("chromium", [CHROMIUM, "--version"]) && (existsSync(join(ROOT, "node_modules/playwright-core")) || peer("playwright-core", ["false"]));
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

interface ClusterView {
  node: string;
  leader: string | null;
  workers: { id: string; node: string }[];
}

/** Requests with shared prefixes and usage, so the plots, hit rates and decisions have data. */
async function traffic(url: string, n: number): Promise<void> {
  const one = async (i: number) => {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-session-id": `user-${i % 4}` },
      body: JSON.stringify({
        model: "herd-sim", stream: true, stream_options: { include_usage: true }, max_tokens: 8 + (i % 5) * 6,
        messages: [{ role: "system", content: `You answer questions about document ${i % 3}. ${"This document is long and shared. ".repeat(40)}` }, { role: "user", content: `question ${i}` }],
      }),
    });
    await r.text();
  };
  for (let i = 0; i < n; i += 4) await Promise.all([0, 1, 2, 3].map((k) => one(i + k)));
}

describe("status page in headless Chromium", () => {
  let live: LiveHerd | null = null;
  let profile = "";
  beforeAll(() => {
    profile = mkdtempSync(join(tmpdir(), "herd-ui-chromium-"));
  });
  afterAll(async () => {
    await live?.stop();
    rmSync(profile, { recursive: true, force: true });
  });

  test.skipIf(!hasChromium())("loads without console errors, shows workers and leader, shows a drain within 2 s", async () => {
    live = await startLiveHerd("herd-ui");
    const url = live.herd.url;
    await traffic(url, 24);
    const view = (await (await fetch(`${url}/admin/cluster`)).json()) as ClusterView;
    expect(view.workers.length).toBeGreaterThanOrEqual(1);
    const { chromium } = await import("playwright-core");
    const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, args: FLAGS, headless: true, viewport: { width: 1280, height: 900 } });
    const problems: string[] = [];
    try {
      const page = await context.newPage();
      page.on("console", (m) => {
        if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`);
      });
      page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
      await page.goto(`${url}/`);
      await page.waitForSelector("body[data-loaded='1']", { state: "attached", timeout: 15_000 });
      await page.waitForSelector("#decisions tbody tr", { timeout: 10_000 });
      // Worker ids and the leader, as the admin API names them.
      for (const w of view.workers) await page.waitForSelector(`tr[data-worker="${w.id}"]`, { timeout: 5_000 });
      expect(await page.textContent("#leader")).toBe(view.leader!);
      expect(view.leader).toBe("obs-node");
      expect(await page.textContent("#node")).toBe(view.node);
      // Plots are drawn from the decision records (TTFT has a line).
      expect(await page.locator("#plot-ttft svg path").count()).toBeGreaterThan(0);
      expect(await page.locator("#plot-rate svg path").count()).toBe(1);
      // Planner and KV tier sections come from their admin endpoints.
      expect(await page.textContent("#planner")).toContain("herd-sim/aggregated");
      expect(await page.textContent("#tier")).toContain("cpu");
      if (process.env.HERD_SCREENSHOTS === "1") await page.screenshot({ path: join(ROOT, "docs/status-page-1280.png"), fullPage: true });

      // Drain through the admin API (what `herd drain` calls): the row says drained within 2 s.
      const target = view.workers.find((w) => w.node === view.node)!;
      const drained = await fetch(`${url}/admin/workers/${target.id}/drain`, { method: "POST" });
      expect(drained.status).toBe(200);
      const t0 = performance.now();
      await page.waitForSelector(`tr[data-worker="${target.id}"][data-state="drained"]`, { timeout: 2_000 });
      console.error(`status page: drain visible after ${Math.round(performance.now() - t0)} ms`);
      expect(await page.locator(`tr[data-worker="${target.id}"]`).textContent()).toContain("drained");

      // Keyboard: 2 focuses the workers section, p pauses polling.
      await page.keyboard.press("2");
      expect(await page.evaluate("document.activeElement && document.activeElement.id")).toBe("s-workers");
      await page.keyboard.press("p");
      expect(await page.textContent("#pause")).toBe("resume (p)");
      await page.keyboard.press("p");
      // The page's own drain button: undrain puts it back.
      await page.click(`button[aria-label="undrain ${target.id}"]`);
      await page.waitForSelector(`tr[data-worker="${target.id}"][data-state="ready"]`, { timeout: 5_000 });

      // 390 px: nothing overflows sideways (wide tables scroll inside their own box).
      await page.setViewportSize({ width: 390, height: 844 });
      await page.waitForTimeout(1_200);
      const width = await page.evaluate("document.documentElement.scrollWidth");
      expect(width).toBeLessThanOrEqual(390);
      if (process.env.HERD_SCREENSHOTS === "1") await page.screenshot({ path: join(ROOT, "docs/status-page-390.png"), fullPage: true });
    } finally {
      await context.close();
    }
    expect(problems).toEqual([]);
  }, 120_000);

  test("from another host the page is refused without an admin token (the admin access rule)", async () => {
    const { statusPageRoutes } = await import("../../src/admin/status-page.ts");
    const { defaultConfig } = await import("../../src/config/load.ts");
    const cfg = defaultConfig();
    const app = statusPageRoutes(() => cfg);
    const get = (path: string, ip: string, host = "127.0.0.1:8000") => app.request(path, { headers: { host } }, { ip });
    expect((await get("/", "127.0.0.1")).status).toBe(200);
    expect((await get("/ui/app.js", "127.0.0.1")).headers.get("content-type")).toContain("javascript");
    expect((await get("/", "127.0.0.1", "evil.example:8000")).status).toBe(403);
    const remote = await get("/", "10.0.0.7", "10.0.0.1:8000");
    expect(remote.status).toBe(403);
    expect(await remote.text()).toContain("admin_loopback_only");
    cfg.frontend.admin_token = "s3cret";
    // With a token the shell (no data) is served; its admin calls carry the token.
    expect((await get("/", "10.0.0.7", "10.0.0.1:8000")).status).toBe(200);
    expect((await get("/ui/nothing.js", "127.0.0.1")).status).toBe(404);
    const page = await get("/", "127.0.0.1");
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(await page.text()).toContain('<script src="/ui/app.js"></script>');
  });
});
