// systemd readiness for `herd run` (READY=1, STATUS=…, EXTEND_TIMEOUT_USEC, STOPPING=1). Apart from
// daemon.ts because it is an edge (a child process per message), not wiring.
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";

export interface Notifier {
  enabled: boolean;
  send(vars: string[]): void;
}

/**
 * sd_notify through `systemd-notify` (a child process, so the unit needs NotifyAccess=all, which
 * systemd/herd.service sets). NOTIFY_SOCKET is taken out of herd's environment so that engines,
 * which inherit it, cannot speak for the unit.
 */
export function systemdNotifier(log: Logger): Notifier {
  const socket = process.env.NOTIFY_SOCKET;
  if (!socket) return { enabled: false, send: () => {} };
  delete process.env.NOTIFY_SOCKET;
  let warned = false;
  return {
    enabled: true,
    send(vars) {
      try {
        const p = Bun.spawn(["systemd-notify", ...vars], { env: { ...process.env, NOTIFY_SOCKET: socket }, stdout: "ignore", stderr: "pipe" });
        void p.exited.then(async (code) => {
          if (code !== 0 && !warned) {
            warned = true;
            log.warn("systemd-notify failed", { code, stderr: (await new Response(p.stderr).text()).trim() });
          }
        });
      } catch (e) {
        if (!warned) log.warn("cannot run systemd-notify", { err: errorMessage(e) });
        warned = true;
      }
    },
  };
}
