// The built-in status page: GET / and /ui/ (the HTML shell), /ui/app.js, /ui/style.css. Static
// assets embedded as string modules (page-*.ts); the page reads everything else from the admin API
// (/admin/cluster, /admin/requests, /admin/pd/traces, /admin/planner, /admin/kv-tier), polling.
//
// Access: the admin rule (routes.ts checkAccess) — loopback clients with a loopback Host and no
// foreign Origin. From another host the shell (which holds no data) is served only when
// frontend.admin_token is set; the page then asks for the token and sends it as a Bearer header on
// its admin calls, which checkAccess verifies as for any other client. Without a token: 403, as /admin.
// A strict Content-Security-Policy (no inline script or style, same origin only) and no framing.
import { Hono, type Context } from "hono";
import type { Config } from "../config/types.ts";
import { HerdError } from "../core/errors.ts";
import { KeySet, isLoopback } from "../http/auth.ts";
import { PAGE_CSS } from "./page-css.ts";
import { PAGE_HTML } from "./page-html.ts";
import { PAGE_JS } from "./page-js.ts";
import { checkAccess } from "./routes.ts";

type Env = { Bindings: { ip: string | null } };

const SECURITY_HEADERS = {
  "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

const ASSETS: Record<string, { type: string; body: string }> = {
  "/": { type: "text/html; charset=utf-8", body: PAGE_HTML },
  "/ui": { type: "text/html; charset=utf-8", body: PAGE_HTML },
  "/ui/": { type: "text/html; charset=utf-8", body: PAGE_HTML },
  "/ui/index.html": { type: "text/html; charset=utf-8", body: PAGE_HTML },
  "/ui/app.js": { type: "text/javascript; charset=utf-8", body: PAGE_JS },
  "/ui/style.css": { type: "text/css; charset=utf-8", body: PAGE_CSS },
};

/** `config` is read per request (a reload may change frontend.admin_token). */
export function statusPageRoutes(config: () => Config): Hono<Env> {
  const app = new Hono<Env>();
  let tokenText: string | null = null;
  let token = new KeySet([]);
  const handler = (c: Context<Env>) => {
    const asset = ASSETS[c.req.path];
    if (!asset) return json(new HerdError(404, "not_found_error", `no status page asset ${c.req.path}`, "not_found"));
    const t = config().frontend.admin_token;
    if (t !== tokenText) {
      tokenText = t;
      token = new KeySet(t ? [t] : []);
    }
    // A remote browser cannot send the token on a navigation: the data calls carry it.
    const denied = !isLoopback(c.env?.ip ?? null) && token.enabled ? null : checkAccess(c, token);
    if (denied) return json(denied);
    return new Response(asset.body, { headers: { "content-type": asset.type, ...SECURITY_HEADERS } });
  };
  for (const path of Object.keys(ASSETS)) app.get(path, handler);
  return app;
}

function json(e: HerdError): Response {
  return new Response(JSON.stringify(e.toJSON()), { status: e.status, headers: { "content-type": "application/json", ...e.headers } });
}
