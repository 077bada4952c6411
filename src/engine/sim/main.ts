// `herd sim-engine …`: parse flags, start the simulated engine, print vLLM's readiness lines on stdout,
// stop on SIGTERM/SIGINT. Exit codes: 0 after a signal, 1 when it cannot start (e.g. port taken),
// 2 on a usage error, 70 on a --crash-after crash.

import { errorMessage } from "../../core/errors.ts";
import { RealClock, every } from "../../core/clock.ts";
import { SimKvPublisher, type KvEventsConfig } from "./kv-publisher.ts";
import { parseSimArgs, simUsage, UsageError } from "./options.ts";
import { startSimEngine } from "./server.ts";

export const CRASH_EXIT_CODE = 70;

export async function simEngineMain(argv: string[]): Promise<number> {
  let opts;
  try {
    opts = parseSimArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`herd sim-engine: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  if (opts === null) {
    process.stdout.write(simUsage() + "\n");
    return 0;
  }
  const log = (line: string) => process.stdout.write(line + "\n");
  let engine;
  let kv: SimKvPublisher | null = null;
  try {
    // Bound before the model "loads", as vLLM creates its publisher when the engine core starts.
    if (opts.kvEvents) {
      const bindHost = opts.kvEventsBindHost;
      const config = bindHost === null ? opts.kvEvents : withBindHost(opts.kvEvents, bindHost);
      kv = new SimKvPublisher({ config, encoding: opts.kvEventsEncoding, dropFraction: opts.kvEventsDropFraction, seed: opts.seed, ...(bindHost !== null ? { bind: true } : {}) });
      log(`INFO:     KV events: publisher on ${kv.endpoint}${kv.replayEndpoint ? `, replay on ${kv.replayEndpoint}` : ""}, topic ${JSON.stringify(opts.kvEvents.topic)}, ${opts.kvEventsEncoding} encoding`);
    }
    const pub = kv;
    engine = await startSimEngine({ ...opts, log, onCrash: () => process.exit(CRASH_EXIT_CODE), ...(pub ? { onKvEvents: (ev) => pub.publish(ev) } : {}) });
  } catch (e) {
    kv?.close();
    process.stderr.write(`herd sim-engine: cannot start: ${errorMessage(e)}\n`);
    return 1;
  }
  const e = engine;
  return await new Promise<number>((resolve) => {
    const stop = (sig: string) => {
      log(`INFO:     Shutting down (${sig})`);
      void e.stop().then(() => {
        kv?.close();
        resolve(0);
      });
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
    watchParent(() => stop("supervisor gone"));
  });
}

/**
 * A herd that dies without stopping its engines (SIGKILL, OOM) would leave simulated engines
 * running until the next herd start cleans them up. The supervisor names itself in
 * HERD_SUPERVISOR_PID; when this process is re-parented away from it, the engine stops itself.
 * (Real engines can't do this; for them the next start's orphan sweep is the safety net.)
 */
function watchParent(onGone: () => void): void {
  const expected = Number(process.env.HERD_SUPERVISOR_PID ?? "");
  if (!Number.isInteger(expected) || expected <= 0) return;
  const timer = every(new RealClock({ unref: true }), 1000, () => {
    if (process.ppid === expected) return;
    timer.cancel();
    onGone();
  });
}

if (import.meta.main) process.exit(await simEngineMain(process.argv.slice(2)));

/** `--kv-events-bind-host`: the endpoints' host replaced (`tcp://*:P` → `tcp://HOST:P`); both are bound. */
export function withBindHost(config: KvEventsConfig, host: string): KvEventsConfig {
  const h = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  const rehost = (ep: string) => ep.replace(/^tcp:\/\/(\[[^\]]*\]|[^:/]+)(?=:)/, `tcp://${h}`);
  return { ...config, endpoint: rehost(config.endpoint), replayEndpoint: config.replayEndpoint === null ? null : rehost(config.replayEndpoint) };
}
