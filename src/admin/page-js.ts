// The status page's script (plain ES2017: polling, tables, hand-written SVG plots), as a string
// module so `bun build --compile` embeds it in the binary (no CDN, no build step). Served by
// status-page.ts; keep it free of backticks, dollar-brace and non-ASCII characters (Bun
// rewrites those as backslash-u escapes, which only JS strings decode).
export const PAGE_JS = String.raw`"use strict";
// herd status page: polls this node's admin API and draws the cluster, its workers, latency plots
// computed from the last decision records, routing decisions, P/D traces, the planner and the KV tier.
(function () {
  var POLL_MS = 1000;
  var WINDOW_MS = 5 * 60 * 1000;
  var BUCKET_MS = 10 * 1000;
  var MAX_RECORDS = 6000;
  var TOKEN_KEY = "herd-admin-token";
  var state = { seq: 0, records: [], nowMs: 0, skewMs: 0, paused: false, endpoints: [], timer: null, inFlightPoll: false };
  var $ = function (id) { return document.getElementById(id); };

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; } }
  function headers() { var t = token(); return t ? { authorization: "Bearer " + t } : {}; }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.className = attrs[k];
      else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function replace(id, node) { var box = $(id); box.textContent = ""; box.appendChild(node); }
  function fmtMs(x) { return x === null || x === undefined || !isFinite(x) ? "\u2013" : x < 10 ? x.toFixed(2) + " ms" : x < 1000 ? Math.round(x) + " ms" : (x / 1000).toFixed(2) + " s"; }
  function pct(x) { return x === null || x === undefined || !isFinite(x) ? "\u2013" : Math.round(x * 100) + " %"; }
  function num(x) { return x === null || x === undefined ? "\u2013" : String(x); }
  function bytes(x) { if (!isFinite(x)) return "\u2013"; var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0; while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; } return (i ? x.toFixed(1) : x) + " " + u[i]; }
  function ago(ms) { return ms < 1500 ? "now" : ms < 90000 ? Math.round(ms / 1000) + " s ago" : Math.round(ms / 60000) + " min ago"; }

  function get(path) {
    return fetch(path, { headers: headers(), cache: "no-store" }).then(function (r) {
      if (r.status === 401 || r.status === 403) { showAuth(r.status); return null; }
      if (!r.ok) return null;
      return r.json();
    });
  }
  function post(path) {
    return fetch(path, { method: "POST", headers: headers() }).then(function (r) { return r.ok; });
  }

  function showAuth(status) {
    $("auth").hidden = false;
    $("auth-msg").textContent = status === 401 ? "The admin token was refused." : "This page needs the admin token (frontend.admin_token) from a non-loopback address.";
  }

  // ---- cluster and workers ----
  function renderCluster(c) {
    var leader = c.leader || "none";
    $("node").textContent = c.node;
    $("leader").textContent = leader;
    $("leader").setAttribute("data-leader", leader);
    $("term").textContent = String(c.term);
    $("policy").textContent = c.policy;
    $("inflight").textContent = String(c.in_flight === undefined ? "\u2013" : c.in_flight);
    $("draining").hidden = !c.draining;
    var rows = (c.nodes || []).map(function (n) {
      return el("tr", null, [el("td", { text: n.name }), el("td", { text: n.address }), el("td", null, [badge(n.state)]), el("td", { text: n.name === c.leader ? "leader" : "" }), el("td", { text: ago(n.last_seen_ms) })]);
    });
    replace("nodes", table(["node", "address", "state", "role", "last seen"], rows));
  }

  function badge(s) { return el("span", { class: "badge s-" + s, text: s }); }

  function workerStats() {
    var by = {};
    state.records.forEach(function (r) {
      if (!r.worker) return;
      var w = by[r.worker] || (by[r.worker] = { prompt: 0, cached: 0, lastError: null, lastErrorAt: 0 });
      if (r.cached_tokens !== null && r.cached_tokens !== undefined) { w.prompt += Math.max(r.input_length, r.cached_tokens); w.cached += r.cached_tokens; }
      if (r.error && r.outcome !== "client_closed" && r.outcome !== "client_stalled") { w.lastError = r.outcome + ": " + r.error; w.lastErrorAt = r.timestamp; }
    });
    return by;
  }

  function renderWorkers(c) {
    var stats = workerStats();
    var rows = (c.workers || []).map(function (w) {
      var s = stats[w.id] || { prompt: 0, cached: 0, lastError: null };
      var st = w.drained ? "drained" : w.state;
      var err = s.lastError;
      if (w.engine && w.engine.last_exit) err = "exit " + (w.engine.last_exit.signal || w.engine.last_exit.code) + (err ? "; " + err : "");
      if (!err && w.engine && (w.state === "failed" || w.state === "starting") && w.engine.reason) err = w.engine.reason;
      if (w.last_error) err = w.last_error + (s.lastError ? "; " + s.lastError : "");
      var action = w.drained
        ? el("button", { type: "button", onclick: function () { post("/admin/workers/" + w.id + "/undrain").then(poll); }, "aria-label": "undrain " + w.id, text: "undrain" })
        : el("button", { type: "button", onclick: function () { post("/admin/workers/" + w.id + "/drain").then(poll); }, "aria-label": "drain " + w.id, text: "drain" });
      var kvEv = w.kv_events ? (w.kv_events.connected ? "ok" : "down") + (w.kv_events.gaps ? " \u00b7 " + w.kv_events.gaps + " gaps" : "") : "\u2013";
      return el("tr", { "data-worker": w.id, "data-state": st }, [
        el("td", { class: "mono", text: w.id }),
        el("td", null, [badge(st)]),
        el("td", { text: w.role }),
        el("td", { class: "num", text: num(w.load.in_flight) + (w.load.waiting ? " (+" + w.load.waiting + " waiting)" : "") }),
        el("td", null, [bar(w.load.kv_usage)]),
        el("td", { class: "num", text: s.prompt > 0 ? pct(s.cached / s.prompt) : "\u2013" }),
        el("td", { class: "num", text: String(w.restarts) }),
        el("td", { text: kvEv }),
        el("td", { class: "err", text: err || "" }),
        el("td", null, [w.node === c.node ? action : null]),
      ]);
    });
    replace("workers", table(["worker", "state", "role", "in flight", "KV usage", "prefix hits", "restarts", "KV events", "last error", ""], rows));
  }

  function bar(x) {
    if (x === null || x === undefined) return el("span", { text: "\u2013" });
    var b = el("span", { class: "bar", role: "img", "aria-label": pct(x) });
    var fill = el("span", { class: "fill" });
    fill.style.width = Math.min(100, Math.round(x * 100)) + "%"; // CSSOM, which the CSP allows (a style attribute it does not)
    b.appendChild(fill);
    return el("span", { class: "barbox" }, [b, el("span", { class: "num", text: pct(x) })]);
  }

  function table(head, rows) {
    // Each cell names its column, for the narrow layout (one card per row, see the stylesheet).
    rows.forEach(function (r) { for (var i = 0; i < r.children.length; i++) if (head[i]) r.children[i].setAttribute("data-label", head[i]); });
    var t = el("table", null, [el("thead", null, [el("tr", null, head.map(function (h) { return el("th", { scope: "col", text: h }); }))]), el("tbody", null, rows)]);
    if (rows.length === 0) t.appendChild(el("caption", { text: "none" }));
    return el("div", { class: "scroll", tabindex: "0" }, [t]);
  }

  // ---- latency plots from the decision records ----
  function quantile(sorted, q) {
    if (sorted.length === 0) return null;
    var i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
    return sorted[i];
  }
  function series(field) {
    var end = state.nowMs, start = end - WINDOW_MS, n = Math.ceil(WINDOW_MS / BUCKET_MS);
    var buckets = [];
    for (var i = 0; i < n; i++) buckets.push([]);
    state.records.forEach(function (r) {
      if (r.timestamp < start) return;
      var i = Math.min(n - 1, Math.floor((r.timestamp - start) / BUCKET_MS));
      if (field === "rate") buckets[i].push(1);
      else if (r[field] !== null && r[field] !== undefined && r.outcome === "complete") buckets[i].push(r[field]);
    });
    if (field === "rate") return [buckets.map(function (b) { return b.length / (BUCKET_MS / 1000); })];
    var sorted = buckets.map(function (b) { return b.slice().sort(function (a, c) { return a - c; }); });
    return [0.5, 0.95, 0.99].map(function (q) { return sorted.map(function (b) { return quantile(b, q); }); });
  }

  var SVGNS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) { var e = document.createElementNS(SVGNS, tag); for (var k in attrs) e.setAttribute(k, attrs[k]); return e; }

  function plot(id, title, field, unitFmt, labels) {
    var lines = series(field);
    var W = 320, H = 110, L = 4, R = 4, T = 6, B = 16;
    var max = 0;
    lines.forEach(function (l) { l.forEach(function (v) { if (v !== null && v > max) max = v; }); });
    if (max === 0) max = 1;
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title, class: "plot" });
    for (var g = 0; g <= 2; g++) { var y = T + (H - T - B) * g / 2; s.appendChild(svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" })); }
    var n = lines[0].length;
    lines.forEach(function (l, k) {
      var d = "", pen = false;
      l.forEach(function (v, i) {
        if (v === null) { pen = false; return; }
        var x = L + (W - L - R) * (i + 0.5) / n, y = T + (H - T - B) * (1 - v / max);
        d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1) + " ";
        pen = true;
      });
      if (d) s.appendChild(svg("path", { d: d, class: "line l" + k }));
    });
    var axis = svg("text", { x: L, y: H - 3, class: "axis" }); axis.textContent = "\u22125 min"; s.appendChild(axis);
    var now = svg("text", { x: W - R, y: H - 3, class: "axis end" }); now.textContent = "now"; s.appendChild(now);
    var top = svg("text", { x: W - R, y: T + 8, class: "axis end" }); top.textContent = unitFmt(max); s.appendChild(top);
    var last = lines.map(function (l) { for (var i = l.length - 1; i >= 0; i--) if (l[i] !== null) return l[i]; return null; });
    var legend = el("p", { class: "legend" }, labels.map(function (lab, k) { return el("span", { class: "key l" + k }, [lab + " " + unitFmt(last[k])]); }));
    replace(id, el("figure", null, [el("figcaption", { text: title }), s, legend]));
  }

  function renderPlots() {
    plot("plot-ttft", "TTFT", "ttft_ms", fmtMs, ["p50", "p95", "p99"]);
    plot("plot-itl", "ITL (mean per request)", "itl_ms", fmtMs, ["p50", "p95", "p99"]);
    plot("plot-e2e", "E2E latency", "e2e_ms", fmtMs, ["p50", "p95", "p99"]);
    plot("plot-rate", "Requests", "rate", function (v) { return v === null ? "\u2013" : v.toFixed(1) + "/s"; }, ["rate"]);
  }

  // ---- routing decisions ----
  function termsText(t) {
    if (!t) return "";
    return Object.keys(t).slice(0, 8).map(function (k) { var v = t[k]; return k + "=" + (typeof v === "number" ? (Math.round(v * 1000) / 1000) : v); }).join(" ");
  }
  function renderDecisions() {
    var last = state.records.slice(window.innerWidth < 600 ? -5 : -15).reverse();
    var rows = last.map(function (r) {
      return el("tr", null, [
        el("td", { text: new Date(r.timestamp).toLocaleTimeString() }),
        el("td", { text: r.model || "\u2013" }),
        el("td", { class: "mono", text: r.worker || "\u2013" }),
        el("td", { text: (r.policy || "\u2013") }),
        el("td", { class: "num", text: num(r.input_length) + (r.cached_tokens !== null ? " / " + r.cached_tokens + " cached" : "") }),
        el("td", null, [badge(r.outcome === "complete" ? "ok" : r.outcome), r.error ? " " + r.error : ""]),
        el("td", { class: "num", text: fmtMs(r.ttft_ms) }),
        el("td", { class: "why", text: (r.reason ? r.reason + " \u00b7 " : "") + termsText(r.terms) }),
      ]);
    });
    replace("decisions", table(["time", "model", "worker", "policy", "prompt tokens", "outcome", "TTFT", "why (chosen worker's terms)"], rows));
  }

  // ---- P/D, planner, tier ----
  function renderPd(p) {
    var traces = (p && p.traces) || [];
    var rows = traces.slice(-10).reverse().map(function (e) {
      var t = e.trace || {};
      var legs = (t.legs || []).map(function (l) { return l.name + " \u2192 " + l.worker + " (" + l.outcome + ", " + fmtMs(l.endMs - l.startMs) + ")"; }).join("; ");
      var d = t.decision || {};
      return el("tr", null, [el("td", { class: "mono", text: e.requestId }), el("td", { text: (d.disaggregate ? "split: " : "local: ") + (d.reason || "") }), el("td", { class: "mono", text: legs }), el("td", { text: (t.fallbacks || []).join(", ") || "\u2013" })]);
    });
    replace("pd", traces.length ? table(["request", "decision", "legs", "fallbacks"], rows) : el("p", { class: "muted", text: "no P/D request yet" }));
  }
  function renderPlanner(p) {
    if (!p) { replace("planner", el("p", { class: "muted", text: "planner off (planner.enabled: false)" })); return; }
    var rows = (p.pools || []).map(function (x) {
      var a = x.actual || {};
      var actual = Object.keys(a).filter(function (k) { return a[k]; }).map(function (k) { return a[k] + " " + k; }).join(", ") || "none";
      return el("tr", null, [el("td", { text: x.pool }), el("td", { class: "num", text: String(x.desired) }), el("td", { text: actual }), el("td", { text: x.reason }), el("td", { class: "num", text: String(x.held ? x.held.requests : 0) }), el("td", { class: "why", text: termsText(x.terms) })]);
    });
    replace("planner", table(["pool", "desired", "actual", "reason", "held", "terms"], rows));
  }
  function renderTier(t) {
    if (!t || !t.enabled) { replace("tier", el("p", { class: "muted", text: "no KV tier (kv_tier)" })); return; }
    var rows = (t.tiers || []).map(function (x) {
      var looks = x.hits + x.misses;
      return el("tr", null, [el("td", { text: x.tier }), el("td", null, [bar(x.capacity_bytes ? x.used_bytes / x.capacity_bytes : null)]), el("td", { class: "num", text: bytes(x.used_bytes) + " / " + bytes(x.capacity_bytes) }), el("td", { class: "num", text: String(x.objects) }), el("td", { class: "num", text: looks ? pct(x.hits / looks) : "\u2013" }), el("td", { class: "num", text: String(x.evictions) })]);
    });
    replace("tier", el("div", null, [table(["tier", "fill", "used", "objects", "hit rate", "evictions"], rows), el("p", { class: t.corrupt_reads ? "err" : "muted", text: "corrupt reads: " + t.corrupt_reads })]));
  }

  // ---- polling ----
  function has(ep) { return state.endpoints.indexOf(ep) >= 0; }
  function poll() {
    if (state.inFlightPoll) return Promise.resolve();
    state.inFlightPoll = true;
    return get("/admin/cluster").then(function (c) {
      if (!c) return;
      $("auth").hidden = true;
      state.endpoints = c.admin_endpoints || [];
      renderCluster(c);
      var jobs = [
        has("GET /requests") ? get("/admin/requests?since=" + state.seq) : Promise.resolve(null),
        get("/admin/pd/traces"),
        has("GET /planner") ? get("/admin/planner") : Promise.resolve(null),
        has("GET /kv-tier") ? get("/admin/kv-tier") : Promise.resolve(null),
      ];
      return Promise.all(jobs).then(function (r) {
        var req = r[0];
        if (req) {
          if (req.seq < state.seq) state.records = [];
          state.seq = req.seq;
          state.nowMs = req.now_ms;
          state.records = state.records.concat(req.records).filter(function (x) { return x.timestamp >= req.now_ms - WINDOW_MS; }).slice(-MAX_RECORDS);
        }
        renderWorkers(c);
        renderPlots();
        renderDecisions();
        renderPd(r[1]);
        renderPlanner(r[2]);
        renderTier(r[3]);
        $("updated").textContent = new Date().toLocaleTimeString();
        document.body.setAttribute("data-loaded", "1");
      });
    }).catch(function (e) {
      $("updated").textContent = "unreachable (" + (e && e.message ? e.message : e) + ")";
    }).then(function () { state.inFlightPoll = false; });
  }

  function schedule() {
    clearInterval(state.timer);
    state.timer = state.paused ? null : setInterval(poll, POLL_MS);
    $("pause").textContent = state.paused ? "resume (p)" : "pause (p)";
    $("pause").setAttribute("aria-pressed", state.paused ? "true" : "false");
  }

  document.addEventListener("keydown", function (e) {
    if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA") || e.ctrlKey || e.metaKey || e.altKey) return;
    var sections = ["s-cluster", "s-workers", "s-latency", "s-decisions", "s-pd", "s-planner", "s-tier"];
    if (e.key === "p") { state.paused = !state.paused; schedule(); }
    else if (e.key === "r") poll();
    else if (e.key === "?") $("help").hidden = !$("help").hidden;
    else if (e.key >= "1" && e.key <= "7") { var s = $(sections[Number(e.key) - 1]); s.focus(); s.scrollIntoView({ block: "start" }); }
    else return;
    e.preventDefault();
  });
  $("pause").addEventListener("click", function () { state.paused = !state.paused; schedule(); });
  $("auth").addEventListener("submit", function (e) {
    e.preventDefault();
    try { sessionStorage.setItem(TOKEN_KEY, $("auth-token").value); } catch (err) { /* private mode: token for this poll only */ }
    poll();
  });
  poll();
  schedule();
})();
`;
