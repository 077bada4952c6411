// A loopback port that is free now, for a server or child process a test starts next (the kernel
// picks it; another process could take it before the test binds, which is rare and shows as a bind
// error, not a wrong result).
export async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}
