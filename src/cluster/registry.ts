// One line per discovery backend. A new backend is one file plus one line here.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import type { ClusterConfig, DiscoveryKind } from "../config/types.ts";
import type { DiscoveryBackend, HeartbeatTiming } from "./backend.ts";
import { httpPeerClient } from "./client.ts";
import type { ElectionTiming } from "./election.ts";
import { EtcdBackend } from "./etcd.ts";
import { FileBackend } from "./file.ts";
import { PeersBackend } from "./peers.ts";
import type { StateStore } from "./state.ts";
import type { PeerTransport } from "./tls.ts";

export interface BackendDeps {
  cluster: ClusterConfig;
  store: StateStore;
  fileDir: string;
  token: string;
  clock: Clock;
  rng: Rng;
  log: Logger;
  dial?: (address: string) => string;
  timing?: HeartbeatTiming;
  election?: ElectionTiming;
  fetch?: typeof fetch;
  /** How peer API calls go out (TLS identity, scheme); etcd keeps `fetch`. */
  transport?: PeerTransport;
}

export const BACKENDS: Record<DiscoveryKind, (d: BackendDeps) => DiscoveryBackend> = {
  file: (d) => new FileBackend({ dir: d.fileDir, clock: d.clock, log: d.log, incarnation: d.store.bumpIncarnation(), timing: d.timing }),
  peers: (d) =>
    new PeersBackend({
      seeds: d.cluster.peers.seeds,
      store: d.store,
      client: httpPeerClient({ token: d.token, dial: d.dial, fetch: d.transport?.fetch ?? d.fetch, scheme: d.transport?.scheme, log: d.log, clock: d.clock }),
      clock: d.clock,
      rng: d.rng,
      log: d.log,
      timing: d.timing,
      election: d.election,
    }),
  etcd: (d) => new EtcdBackend({ ...d.cluster.etcd, clock: d.clock, rng: d.rng, log: d.log, fetch: d.fetch }),
};

export function createBackend(kind: DiscoveryKind, d: BackendDeps): DiscoveryBackend {
  return BACKENDS[kind](d);
}
