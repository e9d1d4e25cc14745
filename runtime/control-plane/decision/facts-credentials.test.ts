/**
 * The facts a decision is asked about (SPEC 4.1): ingress or egress from the request headers,
 * repeated scoping headers told by the raw header lines, and the credential helpers (bearer
 * parsing, the VP shape, OAuth scopes).
 */
import { describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import { factsFromHeaders, proxyFacts } from './facts.js';
import { bearerToken, hasScopes, isVpJwt } from './credentials.js';
import { fakeVpJwt } from './table-testing.js';

describe('facts and credentials', () => {
  it('X-Writ-Actor selects egress, everything else is ingress', () => {
    const e = factsFromHeaders({ [H.actor]: 'bot', [H.service]: 'gpt', [H.targetKind]: 'model', authorization: 'Bearer x', host: 'h' });
    expect(e).toMatchObject({ kind: 'egress', actor: 'bot', target: 'gpt', targetKind: 'model', authorization: 'Bearer x', via: 'authz' });
    const trusted = factsFromHeaders({ host: 'web:80', 'x-forwarded-host': 'orders' }, { method: 'GET', path: '/a', trustedPeer: true });
    expect(trusted).toEqual({ kind: 'ingress', service: undefined, host: 'orders', authorization: undefined, method: 'GET', requestPath: '/a' });
    // From anyone else a forwarded host is ignored: it cannot pick the target.
    expect(factsFromHeaders({ host: 'orders', 'x-forwarded-host': 'web' })).toMatchObject({ kind: 'ingress', host: 'orders' });
    expect(factsFromHeaders({ [H.actor]: '' }).kind).toBe('egress');
  });

  it('X-Writ-Upstream (the egress gateway) selects egress and names the hop; a malformed one names none', () => {
    const vp = fakeVpJwt({ vp: {} });
    expect(factsFromHeaders({ [H.upstream]: 'API.Example.com.:443', [H.agentVp]: vp, [H.action]: 'http:connect' })).toMatchObject({
      kind: 'egress',
      via: 'authz',
      vp,
      hop: { host: 'api.example.com', port: 443, hostPort: 'api.example.com:443', connect: true },
    });
    expect(factsFromHeaders({ [H.upstream]: '127.0.0.1:8080', [H.action]: 'http:get' })).toMatchObject({
      kind: 'egress',
      hop: { host: '127.0.0.1', port: 8080, hostPort: '127.0.0.1:8080', connect: false },
    });
    for (const bad of ['no-port', 'host:0', 'host:99999', 'a b:80', 'user@host:80', '']) {
      const f = factsFromHeaders({ [H.upstream]: bad });
      expect(f.kind, bad).toBe('egress');
      expect((f as { hop?: unknown }).hop, bad).toBeUndefined();
    }
  });

  it('a repeated scoping header is told from a value with a comma by the raw header lines', () => {
    const joined = { [H.actor]: 'bot', [H.task]: 't-1', [H.resource]: 'index/a, secret/b' };
    const twice = ['X-Writ-Actor', 'bot', 'X-Writ-Task', 't-1', 'X-Writ-Resource', 'index/a', 'x-writ-resource', 'secret/b'];
    expect(factsFromHeaders(joined, { rawHeaders: twice })).toMatchObject({ kind: 'egress', repeated: H.resource });
    const once = ['X-Writ-Actor', 'bot', 'X-Writ-Task', 't-1', 'X-Writ-Resource', 'index/a, secret/b'];
    expect(factsFromHeaders(joined, { rawHeaders: once })).not.toHaveProperty('repeated');
    // gRPC: no raw lines, nothing to tell a repeat by.
    expect(factsFromHeaders(joined)).not.toHaveProperty('repeated');
    expect(
      proxyFacts({ [H.task]: 'a, b' }, { host: 'h', port: 80, hostPort: 'h:80', connect: false }, 'GET', 'http://h/', ['X-Writ-Task', 'a', 'X-Writ-Task', 'b']),
    ).toMatchObject({
      repeated: H.task,
    });
  });

  it('a credential header sent twice is told by a comma no token holds, or by the raw lines', () => {
    const bot = { [H.actor]: 'bot', [H.service]: 'search' };
    // Envoy's merged map (gRPC without raw lines) and node's join of the VP header.
    expect(factsFromHeaders({ ...bot, authorization: 'Bearer a.b.c,Bearer d.e.f' })).toMatchObject({ repeatedCredential: 'authorization' });
    expect(factsFromHeaders({ ...bot, [H.agentVp]: 'a.b.c, d.e.f' })).toMatchObject({ repeatedCredential: H.agentVp });
    // node keeps the first Authorization line only: the raw lines show the second.
    const raw = ['X-Writ-Actor', 'bot', 'Authorization', 'Bearer a.b.c', 'authorization', 'Bearer d.e.f'];
    expect(factsFromHeaders({ ...bot, authorization: 'Bearer a.b.c' }, { rawHeaders: raw })).toMatchObject({ repeatedCredential: 'authorization' });
    // One Digest credential for the upstream holds commas; one bearer does not.
    expect(factsFromHeaders({ ...bot, authorization: 'Digest username="a", realm="b"' })).not.toHaveProperty('repeatedCredential');
    expect(factsFromHeaders({ ...bot, authorization: 'Bearer a.b.c' }, { rawHeaders: raw.slice(0, 4) })).not.toHaveProperty('repeatedCredential');
  });

  it('bearer parsing, VP shape and scopes', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bearer  abc ')).toBe('abc');
    expect(bearerToken('Basic abc')).toBeUndefined();
    expect(bearerToken('Bearer a b')).toBeUndefined();
    expect(isVpJwt(fakeVpJwt({ vp: {} }))).toBe(true);
    expect(isVpJwt(fakeVpJwt({ sub: 'x' }))).toBe(false);
    expect(isVpJwt('a.b')).toBe(false);
    expect(hasScopes({ scope: 'a b' }, 'b a')).toBe(true);
    expect(hasScopes({ scp: ['a'] }, 'a b')).toBe(false);
    expect(hasScopes({}, '')).toBe(true);
    expect(hasScopes({}, 'a')).toBe(false);
  });
});
