// For bench/tier-isolation.ts: GET <url> every <everyMs> until stdin closes; prints the latencies (ms)
// as one JSON array. Its own process, so the probe's timers are not on the loop being measured.
export {};
const [url, everyS] = process.argv.slice(2);
const every = Number(everyS);
const lat: number[] = [];
let stop = false;
void (async () => {
  for await (const _ of Bun.stdin.stream()) {
    // reading until EOF
  }
  stop = true;
})();
while (!stop) {
  const t = performance.now();
  try {
    const r = await fetch(url!, { signal: AbortSignal.timeout(10_000) });
    await r.arrayBuffer();
    lat.push(performance.now() - t);
  } catch {
    lat.push(10_000);
  }
  const left = every - (performance.now() - t);
  if (left > 0) await Bun.sleep(left);
}
console.log(JSON.stringify(lat));
process.exit(0);
