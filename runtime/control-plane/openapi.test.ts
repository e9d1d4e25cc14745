/**
 * The management listener (`:8181`) documents every route it serves: `/openapi.json` lists the
 * paths written out below (a route added without its schema, or one lost, fails here), nothing
 * the app answers is missing from it (apart from the portal's page and forwarder, and the
 * document and its viewer), and Swagger UI is served on `/docs` as on the identity authority.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BRAND } from '../lib/brand.js';
import { setLogLevel } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { createControlPlane, type ControlPlane } from './server.js';

setLogLevel('error');

const EXPECTED: Record<string, string[]> = {
  '/healthz': ['get'],
  '/readyz': ['get'],
  '/metrics': ['get'],
  '/v1/registry/services': ['get', 'post'],
  '/v1/registry/services/{name}': ['delete', 'get'],
  '/v1/registry/apply': ['post'],
  '/v1/registry/version': ['get'],
  '/v1/usage': ['post'],
  '/v1/audit': ['get'],
  '/v1/audit/verify': ['get'],
  '/v1/audit/checkpoints': ['get'],
  '/v1/audit/consistency': ['post'],
  '/v1/audit/export': ['get'],
  [`/.well-known/${BRAND}-audit-key`]: ['get'],
  '/.well-known/oauth-protected-resource/services/{name}': ['get'],
  '/v1/decisions/dry-run': ['post'],
  '/v1/budgets/{agent}': ['get'],
  '/v1/budgets/{agent}/reservations': ['post'],
  '/v1/egress/requests': ['get'],
  '/v1/egress/requests/{id}/approve': ['post'],
  '/v1/egress/requests/{id}/deny': ['post'],
};

describe('management API documentation', () => {
  let store: Store;
  let plane: ControlPlane;
  let doc: { openapi: string; paths: Record<string, Record<string, unknown>> };
  beforeAll(async () => {
    store = await openTestPglite();
    plane = await createControlPlane({ store, durableAudit: false });
    doc = (await (await plane.mgmtApp.request('/openapi.json')).json()) as typeof doc;
  });
  afterAll(async () => {
    await plane?.close();
    await store?.close();
  });

  it('/openapi.json lists exactly the management routes, each with its methods', () => {
    expect(doc.openapi).toBe('3.1.0');
    const listed = Object.fromEntries(Object.entries(doc.paths).map(([p, ops]) => [p, Object.keys(ops).sort()]));
    expect(listed).toEqual(EXPECTED);
  });

  it('every route the app serves is documented, but for the portal and the document itself', () => {
    const served = new Set<string>();
    for (const r of plane.mgmtApp.routes) {
      if (r.method === 'ALL' || r.path.startsWith('/portal') || r.path === '/openapi.json' || r.path === '/docs') continue;
      // A parameter's pattern (`:name{.+}`: names with slashes) is the same documented path.
      served.add(`${r.method.toLowerCase()} ${r.path.replace(/:(\w+)(\{[^}]*\})?/g, '{$1}')}`);
    }
    const documented = new Set(Object.entries(EXPECTED).flatMap(([p, ms]) => ms.map((m) => `${m} ${p}`)));
    expect([...served].sort()).toEqual([...documented].sort());
  });

  it('the bodies of the egress approvals and the audit consistency check are documented from their schemas', () => {
    const body = (path: string) => (doc.paths[path]!.post as any).requestBody.content['application/json'].schema;
    expect(body('/v1/egress/requests/{id}/approve')).toEqual({ $ref: '#/components/schemas/EgressApproval' });
    expect(body('/v1/egress/requests/{id}/deny')).toEqual({ $ref: '#/components/schemas/EgressDenial' });
    expect(body('/v1/audit/consistency')).toEqual({ $ref: '#/components/schemas/AuditConsistencyRequest' });
    const list = doc.paths['/v1/egress/requests']!.get as any;
    expect(list.parameters.map((p: { name: string }) => p.name)).toEqual(['status', 'limit']);
  });

  it('GET /docs serves Swagger UI over /openapi.json', async () => {
    const r = await plane.mgmtApp.request('/docs');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await r.text();
    expect(html).toMatch(/swagger-ui/i);
    expect(html).toContain("url: '/openapi.json'");
  });
});
