// The status page's HTML shell, as a string module so `bun build --compile` embeds it in the binary (no
// CDN, no build step). Served by status-page.ts; keep it free of backticks, dollar-brace and
// non-ASCII characters (Bun rewrites those as backslash-u escapes, which only JS strings decode).
export const PAGE_HTML = String.raw`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>herd status</title>
<link rel="stylesheet" href="/ui/style.css">
<link rel="icon" href="data:,">
</head>
<body>
<a class="skip" href="#s-workers">skip to workers</a>
<header>
  <h1>herd <span class="muted">on</span> <span id="node">&hellip;</span></h1>
  <dl class="facts" id="s-cluster" tabindex="-1">
    <div><dt>leader</dt><dd id="leader">&hellip;</dd></div>
    <div><dt>term</dt><dd id="term">&hellip;</dd></div>
    <div><dt>policy</dt><dd id="policy">&hellip;</dd></div>
    <div><dt>in flight</dt><dd id="inflight">&hellip;</dd></div>
  </dl>
  <p id="draining" class="warn" hidden>this node is draining</p>
  <p class="tools"><button type="button" id="pause" aria-pressed="false">pause (p)</button> <span class="muted">updated <span id="updated">never</span> &middot; press ? for keys</span></p>
</header>
<div id="help" class="help" hidden role="note">
  <p><kbd>p</kbd> pause/resume &middot; <kbd>r</kbd> refresh now &middot; <kbd>1</kbd>&ndash;<kbd>7</kbd> jump to cluster, workers, latency, decisions, P/D, planner, KV tier &middot; <kbd>?</kbd> this help</p>
</div>
<form id="auth" hidden>
  <p id="auth-msg"></p>
  <label for="auth-token">admin token</label> <input id="auth-token" type="password" autocomplete="off"> <button type="submit">use</button>
</form>
<main>
  <section aria-labelledby="h-nodes"><h2 id="h-nodes">Nodes</h2><div id="nodes"></div></section>
  <section id="s-workers" tabindex="-1" aria-labelledby="h-workers"><h2 id="h-workers">Workers</h2><div id="workers"></div></section>
  <section id="s-latency" tabindex="-1" aria-labelledby="h-latency"><h2 id="h-latency">Latency and rate <span class="muted">(last 5 min, 10 s buckets)</span></h2>
    <div class="plots"><div id="plot-ttft"></div><div id="plot-itl"></div><div id="plot-e2e"></div><div id="plot-rate"></div></div></section>
  <section id="s-decisions" tabindex="-1" aria-labelledby="h-decisions"><h2 id="h-decisions">Routing decisions <span class="muted">(latest first)</span></h2><div id="decisions"></div></section>
  <section id="s-pd" tabindex="-1" aria-labelledby="h-pd"><h2 id="h-pd">P/D traces</h2><div id="pd"></div></section>
  <section id="s-planner" tabindex="-1" aria-labelledby="h-planner"><h2 id="h-planner">Planner <span class="muted">(desired vs actual)</span></h2><div id="planner"></div></section>
  <section id="s-tier" tabindex="-1" aria-labelledby="h-tier"><h2 id="h-tier">KV tier</h2><div id="tier"></div></section>
</main>
<script src="/ui/app.js"></script>
</body>
</html>
`;
