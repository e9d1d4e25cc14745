/**
 * The Envoy and Istio snippets of README.md parse and point where this code listens: the gRPC
 * cluster at DECISION_GRPC_ADDR's default port over HTTP/2, the HTTP filter at /authz on
 * DECISION_ADDR's, the Istio provider the AuthorizationPolicy names. (No Envoy or Istio on this
 * machine: their own validation runs in the kind e2e where they exist.)
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { H } from '../../lib/brand.js';
import { findObjects, yamlBlocks, yamlDocs, type Doc } from '../../lib/readme-yaml-testing.js';

const text = readFileSync(new URL('./README.md', import.meta.url), 'utf8');
const blocks = yamlBlocks(text);
const docs = yamlDocs(blocks);
const find = (pred: (v: Doc) => boolean): Doc[] => findObjects(docs, pred);

describe('grpc/README.md snippets', () => {
  it('every yaml block parses', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(4);
    for (const b of blocks) for (const d of parseAllDocuments(b)) expect(d.errors).toEqual([]);
  });

  it('Envoy: the gRPC filter uses the v3 transport, fails closed, and its cluster speaks HTTP/2 to :9192 with gRPC health checks', () => {
    const [grpcFilter] = find((v) => (v.typed_config as Doc | undefined)?.grpc_service !== undefined);
    const cfg = grpcFilter!.typed_config as Doc;
    expect(cfg['@type']).toBe('type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz');
    expect(cfg).toMatchObject({ transport_api_version: 'V3', failure_mode_allow: false });
    const clusterName = ((cfg.grpc_service as Doc).envoy_grpc as Doc).cluster_name;
    const [cluster] = find((v) => v.name === clusterName && v.load_assignment !== undefined);
    expect(JSON.stringify(cluster)).toContain('"http2_protocol_options":{}');
    expect(JSON.stringify(cluster)).toContain('"port_value":9192');
    expect(cluster!.health_checks).toMatchObject([{ grpc_health_check: {} }]);
  });

  it('Envoy: the HTTP filter calls /authz on :9191 and passes the X-Writ-* headers both ways', () => {
    const [httpFilter] = find((v) => (v.typed_config as Doc | undefined)?.http_service !== undefined);
    const cfg = httpFilter!.typed_config as Doc;
    const svc = cfg.http_service as Doc;
    expect(svc.path_prefix).toBe('/authz');
    expect((svc.server_uri as Doc).uri).toMatch(/:9191$/);
    const prefix = H.subject.slice(0, H.subject.lastIndexOf('-') + 1);
    expect(JSON.stringify(cfg.allowed_headers)).toContain(`"prefix":"${prefix}"`);
    expect(JSON.stringify((svc.authorization_response as Doc).allowed_upstream_headers)).toContain(`"prefix":"${prefix}"`);
  });

  it('Istio: the gRPC provider points at :9192 and the CUSTOM AuthorizationPolicy names it', () => {
    const [grpcProvider] = find((v) => v.envoyExtAuthzGrpc !== undefined);
    expect(grpcProvider!.envoyExtAuthzGrpc).toMatchObject({ port: 9192, failOpen: false });
    const [httpProvider] = find((v) => v.envoyExtAuthzHttp !== undefined);
    expect(httpProvider!.envoyExtAuthzHttp).toMatchObject({ port: 9191, pathPrefix: '/authz' });
    const [policy] = find((v) => v.kind === 'AuthorizationPolicy');
    expect(policy).toMatchObject({ apiVersion: 'security.istio.io/v1', spec: { action: 'CUSTOM', provider: { name: grpcProvider!.name } } });
  });
});
