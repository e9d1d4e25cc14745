/**
 * The registry facts the token endpoint needs (SPEC 2.1): whether an entry exists and whether an
 * agent may call it. The registry lives in the control plane; the identity authority reads it
 * through this port: in the all-in-one the control plane's registry snapshot in process, otherwise
 * the control plane's management API (`GET /v1/registry/services/{name}`, `IDP_REGISTRY_URL`,
 * presenting `WRIT_API_KEY`, scope `registry:read`), each answer kept `REGISTRY_CACHE_MS`. An
 * unreachable registry refuses the grant (`temporarily_unavailable`), never guesses.
 */
import { allowListFor } from '../../control-plane/decision/egress-target.js';
import type { Service } from '../../control-plane/types.js';
import { errMsg } from '../../lib/log.js';
import { OAuthError } from './errors.js';

export interface RegistryFacts {
  /** The entry named `name`, or undefined when there is none; throws when the registry cannot be read. */
  entry(name: string): Promise<Service | undefined>;
  /** The entry whose `oauthResource` is `url` (a service behind Envoy that opts in), or undefined; throws as `entry`. */
  byResource(url: string): Promise<Service | undefined>;
}

/** A registry in this process (the all-in-one's snapshot, a test's map): its entries by name, and the list. */
export function localRegistry(get: (name: string) => Service | undefined, list: () => Iterable<Service>): RegistryFacts {
  return {
    entry: async (name) => get(name),
    byResource: async (url) => {
      for (const s of list()) if (s.oauthResource === url) return s;
      return undefined;
    },
  };
}

/** How long an answer of the management API is reused (ms). */
export const REGISTRY_CACHE_MS = 2000;

/** The control plane's registry over its management API, answers cached per name. */
export function httpRegistry(o: { baseUrl: string; apiKey?: string; timeoutMs?: number; now?: () => number }): RegistryFacts {
  const now = o.now ?? Date.now;
  const base = o.baseUrl.replace(/\/+$/, '');
  const cache = new Map<string, { at: number; entry: Service | undefined }>();
  let all: { at: number; list: Service[] } | undefined;
  return {
    async byResource(url) {
      if (!all || now() - all.at >= REGISTRY_CACHE_MS) {
        const res = await fetch(`${base}/v1/registry/services`, {
          headers: { accept: 'application/json', ...(o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {}) },
          signal: AbortSignal.timeout(o.timeoutMs ?? 2000),
        });
        if (res.status !== 200) {
          await res.body?.cancel();
          throw new Error(`registry answered ${res.status}`);
        }
        all = { at: now(), list: (await res.json()) as Service[] };
      }
      return all.list.find((s) => s.oauthResource === url);
    },
    async entry(name) {
      const hit = cache.get(name);
      if (hit && now() - hit.at < REGISTRY_CACHE_MS) return hit.entry;
      const res = await fetch(`${base}/v1/registry/services/${encodeURIComponent(name)}`, {
        headers: { accept: 'application/json', ...(o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {}) },
        signal: AbortSignal.timeout(o.timeoutMs ?? 2000),
      });
      if (res.status !== 200 && res.status !== 404) {
        await res.body?.cancel();
        throw new Error(`registry answered ${res.status}`);
      }
      const entry = res.status === 200 ? ((await res.json()) as Service) : (await res.body?.cancel(), undefined);
      if (cache.size >= 10_000) cache.clear();
      cache.set(name, { at: now(), entry });
      return entry;
    },
  };
}

/** A registry read that failed is an outage of the grant, not a refusal of it. */
export async function readEntry(registry: RegistryFacts | undefined, name: string): Promise<Service | undefined> {
  return read(registry, (r) => r.entry(name));
}

/** The entry a service's `oauthResource` URL names (RFC 8707 `resource` from its RFC 9728 metadata). */
export async function readResource(registry: RegistryFacts | undefined, url: string): Promise<Service | undefined> {
  return read(registry, (r) => r.byResource(url));
}

async function read(registry: RegistryFacts | undefined, f: (r: RegistryFacts) => Promise<Service | undefined>): Promise<Service | undefined> {
  if (!registry) throw new OAuthError('temporarily_unavailable', 'the registry is not reachable from the identity authority (IDP_REGISTRY_URL)');
  try {
    return await f(registry);
  } catch (e) {
    throw new OAuthError('temporarily_unavailable', `registry unreachable: ${errMsg(e)}`);
  }
}

/** Why `agent` may not call `target` (SPEC 2.1 allowlists, deny by default), or undefined. */
export function callRefusal(agent: Service | undefined, agentName: string, target: Service): string | undefined {
  if (!agent || agent.kind !== 'agent') return `agent ${JSON.stringify(agentName)} is not a registry agent`;
  const { list, field } = allowListFor(agent, target.kind ?? '');
  return list.includes(target.name) ? undefined : `${target.name} is not in ${agentName}.${field}`;
}
