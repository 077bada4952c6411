// What a simulated run leaves out of the frontend's imperative shell: log lines (a virtual-time run
// pushes hundreds of thousands of requests through the real lifecycle and router; nobody reads their
// logs) and metrics, of which it keeps only each ticket's outcome, the lifecycle's last word on a
// request (src/request/ticket.ts RequestRecorder.done). One copy for run.ts, pd.ts and faults/.
import type { Logger } from "../core/log.ts";
import type { Outcome, RequestRecorder, Ticket } from "../request/ticket.ts";

export const QUIET: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => QUIET };

/** A recorder that hears only `done(ticket, outcome)`, once per ticket when it is released. */
export function outcomeRecorder(done: (t: Ticket, o: Outcome) => void): RequestRecorder {
  return { inFlight() {}, firstToken() {}, upstreamError() {}, retry() {}, done };
}
