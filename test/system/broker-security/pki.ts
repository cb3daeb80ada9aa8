/**
 * A throwaway PKI made with the openssl command: a CA, a server certificate for 127.0.0.1
 * and localhost, and client certificates, all EC P-256 (fast to make), valid for two days.
 */
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runToolOrThrow } from "../../support/processes.ts";

export interface Pki {
  readonly caFile: string;
  readonly server: { readonly certFile: string; readonly keyFile: string };
  /** Client certificate and key for `name` (its CN), signed by the CA. */
  client(name: string): { readonly certFile: string; readonly keyFile: string };
  /**
   * A server certificate for 127.0.0.1 that may also act as a client: etcd's JSON gateway
   * dials etcd's own gRPC port with the server's certificate, which under --client-cert-auth
   * must then be good for client authentication too.
   */
  readonly peer: { readonly certFile: string; readonly keyFile: string };
  /**
   * A client certificate without a Common Name: etcd's JSON gateway refuses a client
   * certificate with one when etcd's own authentication is on (it cannot map the CN to a user).
   */
  readonly anonymousClient: { readonly certFile: string; readonly keyFile: string };
  /** A certificate and key signed by another CA that the broker does not trust. */
  readonly stranger: { readonly certFile: string; readonly keyFile: string };
}

function openssl(dir: string, args: string[]): void {
  runToolOrThrow("openssl", args, { cwd: dir });
}

const KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

function makeCa(dir: string, name: string): { cert: string; key: string } {
  openssl(dir, ["req", "-x509", ...KEY, "-keyout", `${name}.key`, "-out", `${name}.crt`, "-days", "2", "-subj", `/CN=${name}`]);
  return { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
}

function sign(
  dir: string,
  ca: { cert: string; key: string },
  name: string,
  extensions: string,
  subject = `/CN=${name}`,
): { certFile: string; keyFile: string } {
  openssl(dir, ["req", ...KEY, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject]);
  writeFileSync(join(dir, `${name}.ext`), extensions);
  openssl(dir, [
    "x509",
    "-req",
    "-in",
    `${name}.csr`,
    "-CA",
    ca.cert,
    "-CAkey",
    ca.key,
    "-CAcreateserial",
    "-out",
    `${name}.crt`,
    "-days",
    "2",
    "-extfile",
    `${name}.ext`,
  ]);
  // Test keys only: readable by the broker after it drops root for the mosquitto user.
  chmodSync(join(dir, `${name}.key`), 0o644);
  return { certFile: join(dir, `${name}.crt`), keyFile: join(dir, `${name}.key`) };
}

export function makePki(dir: string): Pki {
  const ca = makeCa(dir, "fencegate-test-ca");
  const server = sign(dir, ca, "broker", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  const peer = sign(dir, ca, "peer", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n");
  const anonymousClient = sign(dir, ca, "anonymous", "extendedKeyUsage=clientAuth\n", "/O=fencegate-test");
  const other = makeCa(dir, "someone-elses-ca");
  const stranger = sign(dir, other, "stranger", "extendedKeyUsage=clientAuth\n");
  const clients = new Map<string, { certFile: string; keyFile: string }>();
  return {
    caFile: ca.cert,
    server,
    peer,
    anonymousClient,
    stranger,
    client(name) {
      let c = clients.get(name);
      if (!c) clients.set(name, (c = sign(dir, ca, name, "extendedKeyUsage=clientAuth\n")));
      return c;
    },
  };
}
