/** Pure tables of SPEC 2.12 / 4.4: issuer map parsing, routing (map, tid, hints), subject derivation. */
import { describe, expect, it } from 'vitest';
import { parseIssuerMap, providerSubject, routeClaims, strList, OID_URI } from './resolve.js';

const TID = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const TID2 = '0b1c2d3e-0000-4000-8000-0000000000ff';
const V2 = `https://login.microsoftonline.com/${TID}/v2.0`;
const map = parseIssuerMap(JSON.stringify({ [V2]: 'idp_a:contoso', 'https://initech.okta.com/': { idp: 'idp_b', tenant: 'initech' } }));

describe('issuer map (IDP_ISSUER_MAP)', () => {
  it('parses both entry forms, normalises trailing slashes, defaults to empty', () => {
    expect(map.get(V2)).toEqual({ idp: 'idp_a', tenant: 'contoso' });
    expect(map.get('https://initech.okta.com')).toEqual({ idp: 'idp_b', tenant: 'initech' });
    expect(parseIssuerMap(undefined).size).toBe(0);
    expect(parseIssuerMap('').size).toBe(0);
  });
  it.each([['[1]'], ['nope'], ['{"x":"idp_c:t"}'], ['{"x":"idp_a:bad tenant"}'], ['{"x":{"idp":"idp_a"}}'], ['{"":"idp_a:t"}']])('refuses %s', (raw) => {
    expect(() => parseIssuerMap(raw)).toThrow(/IDP_ISSUER_MAP/);
  });
});

describe('routing claims to (idp, tenant)', () => {
  const cases: [string, Record<string, unknown>, { idp?: 'idp_a' | 'idp_b'; tenant?: string }, unknown][] = [
    ['mapped issuer', { iss: V2 }, {}, { ok: true, idp: 'idp_a', tenant: 'contoso', via: 'issuer_map' }],
    ['mapped issuer with trailing slash', { iss: 'https://initech.okta.com/' }, {}, { ok: true, idp: 'idp_b', tenant: 'initech', via: 'issuer_map' }],
    ['mapped issuer, matching tid', { iss: V2, tid: TID.toUpperCase() }, {}, { ok: true, via: 'issuer_map' }],
    ['mapped issuer, other tid', { iss: V2, tid: TID2 }, {}, { ok: false, reason: 'tid_mismatch' }],
    ['v1 issuer matched by tid', { iss: `https://sts.windows.net/${TID}/`, tid: TID }, {}, { ok: true, idp: 'idp_a', tenant: 'contoso', via: 'tid' }],
    ['no iss, tid only', { tid: TID }, {}, { ok: true, tenant: 'contoso', via: 'tid' }],
    ['unmapped iss without the tid', { iss: 'https://evil.example/', tid: TID }, {}, { ok: false, reason: 'issuer_unknown' }],
    ['unknown tid', { iss: `https://sts.windows.net/${TID2}/`, tid: TID2 }, {}, { ok: false, reason: 'issuer_unknown' }],
    ['unknown issuer', { iss: 'https://unknown.example' }, {}, { ok: false, reason: 'issuer_unknown' }],
    ['no iss, no hints', {}, {}, { ok: false, reason: 'issuer_unknown' }],
    ['hints only', { iss: 'https://unknown.example' }, { idp: 'idp_b', tenant: 'initech' }, { ok: true, idp: 'idp_b', tenant: 'initech', via: 'hints' }],
    ['one hint only', { iss: 'https://unknown.example' }, { tenant: 'initech' }, { ok: false, reason: 'issuer_unknown' }],
    ['hints agreeing with map', { iss: V2 }, { idp: 'idp_a', tenant: 'contoso' }, { ok: true, via: 'issuer_map' }],
    ['tenant hint contradicting map', { iss: V2 }, { tenant: 'fabrikam' }, { ok: false, reason: 'issuer_hint_mismatch' }],
    ['idp hint contradicting map', { iss: V2 }, { idp: 'idp_b' }, { ok: false, reason: 'issuer_hint_mismatch' }],
    ['idp_b hint skips tid matching', { tid: TID }, { idp: 'idp_b' }, { ok: false, reason: 'issuer_unknown' }],
    ['non-string iss is absent', { iss: 42 }, {}, { ok: false, reason: 'issuer_unknown' }],
  ];
  it.each(cases)('%s', (_n, claims, hints, want) => {
    expect(routeClaims(map, claims, hints)).toMatchObject(want as object);
  });
  it('a tid in issuers of two tenants is ambiguous (deny)', () => {
    const two = parseIssuerMap(JSON.stringify({ [V2]: 'idp_a:contoso', [`https://sts.windows.net/${TID}/`]: 'idp_a:other' }));
    expect(routeClaims(two, { tid: TID }, {})).toMatchObject({ ok: false, reason: 'tid_ambiguous' });
  });
});

describe('subject derivation (never email)', () => {
  it.each([
    ['idp_a', { oid: 'o1', sub: 's1', email: 'a@x' }, { claim: 'oid', value: 'o1' }],
    ['idp_a', { [OID_URI]: 'o2', sub: 's1' }, { claim: OID_URI, value: 'o2' }],
    ['idp_a', { sub: 's1', email: 'a@x' }, { claim: 'sub', value: 's1' }],
    ['idp_a', { email: 'a@x', preferred_username: 'a@x' }, undefined],
    ['idp_a', { oid: '  ' }, undefined],
    ['idp_b', { sub: '00u1', oid: 'o1' }, { claim: 'sub', value: '00u1' }],
    ['idp_b', { oid: 'o1', email: 'a@x' }, undefined],
    ['idp_b', { sub: 123 }, undefined],
  ] as const)('%s %j', (idp, claims, want) => {
    expect(providerSubject(idp, claims as Record<string, unknown>)).toEqual(want);
  });
  it('list claims: strings only, deduplicated, sorted, single string accepted', () => {
    expect(strList(['b', 'a', 'a', 3, ''])).toEqual(['a', 'b']);
    expect(strList('solo')).toEqual(['solo']);
    expect(strList({})).toEqual([]);
  });
});
