// The seam through which modules contribute admin endpoints (Caddy's AdminRouter: the admin API
// itself registers almost nothing; /metrics, upstreams and the rest come from their modules). A
// module that owns some state — the KV tier, the planner, the cluster — exports AdminRoutes for it;
// the daemon collects them and the admin app (src/admin) mounts them behind its one access rule
// (loopback, or the admin token). Here, on a low layer, so any module can implement it.
//
//   export const tierAdminRoutes = (svc: TierService): AdminRoute[] =>
//     [{ method: "GET", path: "/kv-tier", handle: () => Response.json(svc.figures()) }];
export interface AdminRoute {
  method: "GET" | "POST";
  /** Path under /admin, starting with "/" (hono syntax for parameters: `/workers/:id`). */
  path: string;
  handle(req: Request, params: Record<string, string>): Response | Promise<Response>;
}
