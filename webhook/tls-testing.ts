/**
 * Test helper: a throwaway CA and a server certificate it signs (SAN localhost, 127.0.0.1),
 * made with the openssl CLI (node:crypto cannot issue X.509 certificates).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface TestPki {
  ca: string;
  cert: string;
  key: string;
}

const openssl = (args: string[], cwd: string) => execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });

/** Writes ca.{key,crt}, server.{key,csr,crt} under `dir` (prefixed by `name`) and returns the PEMs. */
export function makePki(dir: string, name = 'pki'): TestPki {
  const f = (s: string) => join(dir, `${name}-${s}`);
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '2',
      '-subj',
      `/CN=${name} test CA`,
      '-keyout',
      f('ca.key'),
      '-out',
      f('ca.crt'),
    ],
    dir,
  );
  openssl(
    [
      'req',
      '-new',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-subj',
      '/CN=localhost',
      '-keyout',
      f('server.key'),
      '-out',
      f('server.csr'),
    ],
    dir,
  );
  writeFileSync(f('ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  openssl(
    [
      'x509',
      '-req',
      '-in',
      f('server.csr'),
      '-CA',
      f('ca.crt'),
      '-CAkey',
      f('ca.key'),
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      f('ext.cnf'),
      '-out',
      f('server.crt'),
    ],
    dir,
  );
  return { ca: readFileSync(f('ca.crt'), 'utf8'), cert: readFileSync(f('server.crt'), 'utf8'), key: readFileSync(f('server.key'), 'utf8') };
}
