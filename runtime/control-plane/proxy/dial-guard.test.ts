/**
 * What a name the proxy dials may resolve to: never link-local (the metadata service),
 * unspecified or multicast; loopback only for `localhost` names. Real `dns.lookup` underneath.
 */
import type { LookupAddress } from 'node:dns';
import { describe, expect, it } from 'vitest';
import { guardedLookup, refusedAddress } from './dial-guard.js';

const lookup = (name: string, all = false) =>
  new Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[] }>((resolve) =>
    guardedLookup(name, all ? { all: true } : {}, (err, address) => resolve({ err, address })),
  );

describe('proxy dial guard', () => {
  it('refuses link-local, unspecified, multicast and (but for localhost names) loopback addresses', () => {
    for (const [name, address] of [
      ['evil.example', '169.254.169.254'],
      ['evil.example', '::ffff:169.254.169.254'],
      ['evil.example', 'fe80::1'],
      ['evil.example', '0.0.0.0'],
      ['evil.example', '::'],
      ['evil.example', '224.0.0.1'],
      ['evil.example', '127.0.0.1'],
      ['evil.example', '127.1.2.3'],
      ['evil.example', '::1'],
      ['evil.example', '::ffff:127.0.0.1'],
      ['localhost', '169.254.169.254'],
    ]) {
      expect(refusedAddress(name!, address!), `${name} -> ${address}`).toMatch(/resolves to/);
    }
    for (const [name, address] of [
      ['localhost', '127.0.0.1'],
      ['LOCALHOST.', '::1'],
      ['api.localhost', '127.0.0.1'],
      ['orders.default.svc.cluster.local', '10.96.0.12'],
      ['api.example.com', '93.184.216.34'],
      ['api.example.com', '2606:2800:220:1::'],
    ]) {
      expect(refusedAddress(name!, address!), `${name} -> ${address}`).toBeUndefined();
    }
  });

  it('looks names up for real and refuses what they resolve to, one address or all', async () => {
    const local = await lookup('localhost');
    expect(local.err).toBeNull();
    expect(['127.0.0.1', '::1']).toContain(local.address);
    const all = await lookup('localhost', true);
    expect(all.err).toBeNull();
    expect((all.address as LookupAddress[]).length).toBeGreaterThan(0);
    // A name that is an address: the resolver gives it back (the proxy never asks for one it decided as typed).
    for (const all of [false, true]) {
      const metadata = await lookup('169.254.169.254', all);
      expect(metadata.err?.code).toBe('EADDRREFUSED');
      expect(metadata.err?.message).toBe('refused: 169.254.169.254 resolves to 169.254.169.254, a link-local, unspecified or multicast address');
    }
    expect((await lookup('no-such-host.invalid')).err?.code).toMatch(/ENOTFOUND|EAI_AGAIN/);
  });
});
