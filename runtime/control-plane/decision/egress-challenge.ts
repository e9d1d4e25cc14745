/**
 * `/authz` egress for a service that opts in as an OAuth protected resource (issue 43 item 6: its
 * registry entry's `oauthResource`): a refusal that is a credential's carries the RFC 6750 3
 * challenge naming the RFC 9728 metadata the control plane serves for it (`MGMT_PUBLIC_URL` +
 * `/.well-known/oauth-protected-resource/services/{name}`, mgmt `resource-metadata.ts`), which
 * Envoy's ext_authz passes back to the client (HTTP: the answer's headers; gRPC: the denied
 * response's). No credential at all: 401 `Bearer resource_metadata=...`; a Writ token that does
 * not hold: 401 `invalid_token`; a missing scope: 403 `insufficient_scope` (lib/protected-resource.ts
 * `challengeFor`, as the MCP gateway answers). Not through the forward proxy (407), a hop naming
 * its upstream, or an MCP message (the gateway answers its own). Pure.
 */
import { challengeFor, PRM_WELL_KNOWN } from '../../lib/protected-resource.js';
import type { Decision } from '../types.js';
import type { EgressContext } from './egress.js';

/** The path of a service's metadata on the management listener. */
export const SERVICE_METADATA_PREFIX = `${PRM_WELL_KNOWN}/services/`;

/** The metadata URL of entry `name` under MGMT_PUBLIC_URL `base`. */
export const serviceMetadataUrl = (base: string, name: string) => `${base}${SERVICE_METADATA_PREFIX}${encodeURIComponent(name)}`;

/** `d` with the challenge of a service that opts in, when the refusal is a credential's; else `d`. */
export function withChallenge(c: Readonly<EgressContext>, d: Decision): Decision {
  const f = c.facts;
  const base = c.snap.settings.metadataBase;
  if (d.allow || !base || f.via !== 'authz' || f.mcp || f.mcpError || c.proxy || !c.service) return d;
  const entry = c.target ?? c.snap.registry.get(c.service);
  if (!entry?.oauthResource) return d;
  const challenge = challengeFor(d, !d.challenge, serviceMetadataUrl(base, entry.name));
  if (!challenge) return d;
  return { ...d, status: challenge.status, headers: { ...d.headers, 'www-authenticate': challenge.header } };
}
