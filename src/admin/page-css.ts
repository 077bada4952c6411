// The status page's stylesheet, as a string module so `bun build --compile` embeds it in the binary (no
// CDN, no build step). Served by status-page.ts; keep it free of backticks, dollar-brace and
// non-ASCII characters (Bun rewrites those as backslash-u escapes, which only JS strings decode).
export const PAGE_CSS = String.raw`:root { --bg: #fbfbfa; --fg: #1d1f21; --muted: #66696e; --line: #dcdcd8; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --l0: #0969da; --l1: #bf8700; --l2: #cf222e; color-scheme: light dark; }
@media (prefers-color-scheme: dark) { :root { --bg: #16181b; --fg: #e6e6e3; --muted: #9a9ea4; --line: #33363b; --ok: #3fb950; --warn: #d29922; --bad: #f85149; --l0: #58a6ff; --l1: #d29922; --l2: #f85149; } }
* { box-sizing: border-box; }
body { margin: 0; padding: 0 1rem 2rem; background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 1.3rem; margin: .8rem 0 .3rem; }
h2 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
.muted { color: var(--muted); font-weight: normal; }
.mono { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .92em; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 1rem; top: .5rem; background: var(--bg); padding: .2rem .5rem; }
:focus-visible { outline: 2px solid var(--l0); outline-offset: 2px; }
section:focus { outline: none; } section:focus-visible h2 { text-decoration: underline; }
.facts { display: flex; flex-wrap: wrap; gap: .3rem 1.4rem; margin: .2rem 0; }
.facts div { display: flex; gap: .4rem; } .facts dt { color: var(--muted); } .facts dd { margin: 0; font-weight: 600; }
.tools { margin: .4rem 0; } button { font: inherit; padding: .1rem .55rem; border: 1px solid var(--line); border-radius: 4px; background: transparent; color: inherit; cursor: pointer; }
button:hover { border-color: var(--muted); }
.warn { color: var(--warn); font-weight: 600; } .err { color: var(--bad); } .help { border: 1px solid var(--line); padding: 0 .7rem; border-radius: 4px; }
kbd { border: 1px solid var(--line); border-radius: 3px; padding: 0 .3rem; font-size: .9em; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: .25rem .6rem .25rem 0; border-bottom: 1px solid var(--line); vertical-align: top; white-space: nowrap; }
th { color: var(--muted); font-weight: 500; font-size: .9em; }
td.why, td.err { white-space: normal; min-width: 14rem; font-size: .9em; }
caption { caption-side: bottom; color: var(--muted); text-align: left; padding: .3rem 0; }
.num { text-align: right; }
.badge { display: inline-block; padding: 0 .4rem; border-radius: 999px; border: 1px solid currentColor; font-size: .85em; }
.s-ready, .s-ok, .s-alive { color: var(--ok); } .s-draining, .s-drained, .s-starting, .s-suspect, .s-client_closed, .s-client_stalled { color: var(--warn); }
.s-failed, .s-stopped, .s-dead, .s-upstream_failed, .s-broken, .s-refused { color: var(--bad); }
.barbox { display: inline-flex; align-items: center; gap: .4rem; } .bar { display: inline-block; width: 4rem; height: .55rem; border: 1px solid var(--line); border-radius: 2px; }
.bar .fill { display: block; height: 100%; background: var(--l0); }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(17rem, 1fr)); gap: .8rem 1.2rem; }
figure { margin: 0; } figcaption { font-weight: 600; font-size: .95em; }
svg.plot { width: 100%; height: auto; display: block; border-bottom: 1px solid var(--line); }
.grid { stroke: var(--line); stroke-width: .5; } .line { fill: none; stroke-width: 1.6; vector-effect: non-scaling-stroke; }
.line.l0 { stroke: var(--l0); } .line.l1 { stroke: var(--l1); } .line.l2 { stroke: var(--l2); }
.axis { fill: var(--muted); font-size: 9px; } .axis.end { text-anchor: end; }
.legend { margin: .2rem 0 0; display: flex; gap: .9rem; flex-wrap: wrap; font-size: .9em; }
.key::before { content: ""; display: inline-block; width: .8rem; height: .2rem; margin-right: .3rem; vertical-align: middle; background: var(--l0); }
.key.l1::before { background: var(--l1); } .key.l2::before { background: var(--l2); }
@media (max-width: 600px) {
  body { padding: 0 .6rem 1.5rem; font-size: 13px; }
  .scroll table, .scroll tbody, .scroll tr, .scroll td { display: block; width: 100%; }
  .scroll thead { display: none; }
  .scroll tr { border-bottom: 1px solid var(--line); padding: .35rem 0; }
  .scroll td { display: flex; gap: .6rem; border: 0; padding: .05rem 0; white-space: normal; text-align: left; min-width: 0; overflow-wrap: anywhere; }
  .scroll td::before { content: attr(data-label); color: var(--muted); flex: none; width: 6.5rem; }
  .scroll td:not([data-label])::before { content: none; }
}
`;
