// A throwaway PKI for TLS tests, made with the openssl command line (Debian's openssl package):
// a CA, node certificates it signs (subjectAltName IP:127.0.0.1 and localhost, for server and
// client use), and a self-signed "untrusted" certificate. Only call inside test()/beforeAll bodies.
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

export interface CertFiles {
  cert: string;
  key: string;
}

function openssl(cwd: string, args: string[]): void {
  const r = spawnSync("openssl", args, { cwd, encoding: "utf8", timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(" ")} failed: ${r.stderr}`);
}

const EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

/** Writes ca.pem and, per name, <name>.pem/<name>.key signed by it; `untrusted` is self-signed. */
export function makePki(dir: string, names: string[]): { ca: string; nodes: Record<string, CertFiles>; untrusted: CertFiles } {
  openssl(dir, ["req", "-x509", ...EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=herd test CA"]);
  writeFileSync(join(dir, "ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n");
  const nodes: Record<string, CertFiles> = {};
  for (const n of names) {
    openssl(dir, ["req", ...EC, "-keyout", `${n}.key`, "-out", `${n}.csr`, "-subj", `/CN=${n}`]);
    openssl(dir, ["x509", "-req", "-in", `${n}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${n}.pem`, "-days", "2", "-extfile", "ext.cnf"]);
    nodes[n] = { cert: join(dir, `${n}.pem`), key: join(dir, `${n}.key`) };
  }
  openssl(dir, ["req", "-x509", ...EC, "-keyout", "untrusted.key", "-out", "untrusted.pem", "-days", "2", "-subj", "/CN=impostor", "-addext", "subjectAltName=IP:127.0.0.1"]);
  return { ca: join(dir, "ca.pem"), nodes, untrusted: { cert: join(dir, "untrusted.pem"), key: join(dir, "untrusted.key") } };
}
