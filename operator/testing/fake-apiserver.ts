/**
 * An in-test Kubernetes API server for the operator's tests.
 *
 * No real API server can run on these machines (no container engine, no kind, no etcd), so the
 * Kubernetes source is tested against this HTTP server instead, with the real
 * `@kubernetes/client-node` code (KubeConfig, the generated CustomObjects and Coordination
 * clients, the informer's list/watch) talking to it over a socket. It stays honest to the real
 * apiserver by keeping the semantics the operator depends on, as documented in the Kubernetes API
 * concepts (https://kubernetes.io/docs/reference/using-api/api-concepts/):
 *
 * - one cluster-wide, monotonically increasing resourceVersion (etcd's revision), stamped on every
 *   write and on list responses (`metadata.resourceVersion`);
 * - list and watch on the same collection path; watch (`?watch=true`) streams newline-delimited
 *   `{type, object}` events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) starting after the given
 *   resourceVersion (or, with none, synthetic ADDED events for every current object);
 *   `allowWatchBookmarks=true` gets periodic BOOKMARK events carrying only a resourceVersion;
 * - a resourceVersion older than the retained history (`compact()`) is answered with a 200 stream
 *   holding one ERROR event whose object is a Status with code 410 (reason Expired), then closed,
 *   as the apiserver does once etcd has compacted;
 * - custom resources with the status subresource: create ignores `status`; an update of the main
 *   resource ignores `status` and bumps `metadata.generation` only when `spec` changed; an update of
 *   `/status` changes only `status` (generation untouched);
 * - updates must carry the current `metadata.resourceVersion`: a stale one is 409 Conflict, a
 *   missing one is 422 (custom resources require it);
 * - delete of an object with finalizers sets `deletionTimestamp` (and bumps generation) instead of
 *   removing it; the object goes away (DELETED) when an update empties `finalizers`; finalizers
 *   cannot be added once deletionTimestamp is set;
 * - writ.io resources are validated on create and update by the same CRD schemas and CEL rules the
 *   CRDs carry (422 Invalid with the causes), transition rules against the old object;
 * - Lease objects (coordination.k8s.io/v1) as plain namespaced objects with resourceVersion checks;
 * - bearer-token authentication (401 otherwise), and a log of every request as an RBAC
 *   (group, resource, verb) so the RBAC test can compare the chart with what the operator did.
 *
 * Not modelled (the operator does not use them): PATCH, label/field selectors, pagination
 * (`limit`/`continue`), server-side apply, admission webhooks, watch `timeoutSeconds` expiry.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { API_GROUP } from '../../runtime/lib/brand.js';
import { close as closeServer, listen } from '../../runtime/lib/http.js';
import { kindOf, KINDS, VERSION } from '../crd/definitions.js';
import { checkResource } from '../resource.js';

type Obj = Record<string, any>;
export interface RequestRecord {
  verb: string;
  group: string;
  resource: string;
  namespace?: string;
  name?: string;
  status: number;
}
interface Event {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  collection: string;
  obj: Obj;
}
interface Collection {
  group: string;
  version: string;
  plural: string;
  kind: string;
  statusSubresource: boolean;
}

const COLLECTIONS: Collection[] = [
  ...KINDS.map((k) => ({ group: API_GROUP, version: VERSION, plural: k.plural, kind: k.kind, statusSubresource: true })),
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', statusSubresource: false },
];

const clone = <T>(v: T): T => structuredClone(v);
const status = (code: number, reason: string, message: string, details?: Obj): Obj => ({
  kind: 'Status',
  apiVersion: 'v1',
  metadata: {},
  status: 'Failure',
  message,
  reason,
  code,
  ...(details ? { details } : {}),
});

export interface FakeApiServer {
  url: string;
  token: string;
  requests: RequestRecord[];
  /** Objects as stored (copies). */
  get(plural: string, namespace: string, name: string): Obj | undefined;
  list(plural: string): Obj[];
  /** Writes as a cluster user would (kubectl): create or update the spec. Returns the stored object. */
  apply(obj: Obj): Obj;
  /** kubectl delete (finalizers honoured). */
  remove(plural: string, namespace: string, name: string): void;
  /** Drops the event history: watches from an older resourceVersion now get 410 Gone. */
  compact(): void;
  /** Ends every open watch stream (the apiserver restarting, a load balancer timeout). */
  dropWatches(): void;
  resourceVersion(): number;
  close(): Promise<void>;
}

export async function startFakeApiServer(o: { token?: string; bookmarkMs?: number } = {}): Promise<FakeApiServer> {
  const token = o.token ?? randomUUID();
  const objects = new Map<string, Obj>(); // `${plural}/${ns}/${name}`
  let rv = 1;
  let events: Event[] = [];
  let oldestRetained = 1; // a watch from rv >= oldestRetained - 1 can be served from `events`
  const watchers = new Set<{ collection: string; ns?: string; send(e: Obj): void; end(): void }>();
  const requests: RequestRecord[] = [];

  const keyOf = (c: Collection, ns: string, name: string) => `${c.plural}/${ns}/${name}`;
  function record(type: Event['type'], c: Collection, obj: Obj): void {
    const e: Event = { rv, type, collection: c.plural, obj: clone(obj) };
    events.push(e);
    for (const w of watchers) if (w.collection === c.plural && (!w.ns || w.ns === obj.metadata.namespace)) w.send({ type, object: e.obj });
  }

  function validate(c: Collection, obj: Obj, old?: Obj): Obj | undefined {
    if (c.group !== API_GROUP) return undefined;
    const checked = checkResource(obj, `${obj.metadata?.namespace}/${obj.metadata?.name}`, old);
    if (!checked.errors.length) return undefined;
    const causes = checked.errors.map((e) => ({ reason: 'FieldValueInvalid', message: e.message, field: e.path.join('.') }));
    return status(422, 'Invalid', `${c.kind}.${c.group} "${obj.metadata?.name}" is invalid: ${causes.map((x) => `${x.field}: ${x.message}`).join(', ')}`, {
      name: obj.metadata?.name,
      group: c.group,
      kind: c.kind,
      causes,
    });
  }

  function create(c: Collection, ns: string, body: Obj): [number, Obj] {
    const name = body?.metadata?.name;
    if (typeof name !== 'string' || !name) return [422, status(422, 'Invalid', 'metadata.name: Required value')];
    if (objects.has(keyOf(c, ns, name))) return [409, status(409, 'AlreadyExists', `${c.plural}.${c.group} "${name}" already exists`)];
    const obj = clone(body);
    if (c.statusSubresource) delete obj.status;
    const invalid = validate(c, obj);
    if (invalid) return [422, invalid];
    rv++;
    obj.apiVersion = `${c.group}/${c.version}`;
    obj.kind = c.kind;
    obj.metadata = {
      ...obj.metadata,
      namespace: ns,
      uid: randomUUID(),
      resourceVersion: String(rv),
      creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    };
    if (c.statusSubresource) obj.metadata.generation = 1;
    delete obj.metadata.deletionTimestamp;
    objects.set(keyOf(c, ns, name), obj);
    record('ADDED', c, obj);
    return [201, clone(obj)];
  }

  function update(c: Collection, ns: string, name: string, body: Obj, sub: 'status' | undefined): [number, Obj] {
    const cur = objects.get(keyOf(c, ns, name));
    if (!cur) return [404, status(404, 'NotFound', `${c.plural}.${c.group} "${name}" not found`)];
    const want = body?.metadata?.resourceVersion;
    if (!want) return [422, status(422, 'Invalid', 'metadata.resourceVersion: Invalid value: 0x0: must be specified for an update')];
    if (want !== cur.metadata.resourceVersion)
      return [
        409,
        status(
          409,
          'Conflict',
          `Operation cannot be fulfilled on ${c.plural}.${c.group} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        ),
      ];
    let next: Obj;
    if (sub === 'status') {
      next = { ...clone(cur), status: clone(body.status) };
      const invalid = validate(c, next);
      if (invalid) return [422, invalid];
    } else {
      next = clone(body);
      next.apiVersion = cur.apiVersion;
      next.kind = cur.kind;
      if (c.statusSubresource) next.status = clone(cur.status);
      // Server-owned metadata is kept.
      const keep = ['uid', 'creationTimestamp', 'generation', 'deletionTimestamp', 'namespace', 'name'];
      next.metadata = { ...next.metadata };
      for (const k of keep) {
        if (cur.metadata[k] === undefined) delete next.metadata[k];
        else next.metadata[k] = cur.metadata[k];
      }
      const curFinalizers: string[] = cur.metadata.finalizers ?? [];
      const nextFinalizers: string[] = next.metadata.finalizers ?? [];
      if (cur.metadata.deletionTimestamp && nextFinalizers.some((f) => !curFinalizers.includes(f))) {
        return [422, status(422, 'Forbidden', 'metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted')];
      }
      if (c.statusSubresource && JSON.stringify(cur.spec) !== JSON.stringify(next.spec)) next.metadata.generation = (cur.metadata.generation ?? 1) + 1;
      const invalid = validate(c, next, cur);
      if (invalid) return [422, invalid];
    }
    if (
      JSON.stringify({ ...next, metadata: { ...next.metadata, resourceVersion: '' } }) ===
      JSON.stringify({ ...cur, metadata: { ...cur.metadata, resourceVersion: '' } })
    ) {
      return [200, clone(cur)]; // a no-op update writes nothing and keeps the resourceVersion
    }
    rv++;
    next.metadata.resourceVersion = String(rv);
    if (next.metadata.deletionTimestamp && !(next.metadata.finalizers ?? []).length) {
      objects.delete(keyOf(c, ns, name));
      record('DELETED', c, next);
      return [200, clone(next)];
    }
    objects.set(keyOf(c, ns, name), next);
    record('MODIFIED', c, next);
    return [200, clone(next)];
  }

  function del(c: Collection, ns: string, name: string): [number, Obj] {
    const cur = objects.get(keyOf(c, ns, name));
    if (!cur) return [404, status(404, 'NotFound', `${c.plural}.${c.group} "${name}" not found`)];
    if ((cur.metadata.finalizers ?? []).length) {
      if (!cur.metadata.deletionTimestamp) {
        rv++;
        const next = clone(cur);
        next.metadata.deletionTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
        next.metadata.deletionGracePeriodSeconds = 0;
        if (c.statusSubresource) next.metadata.generation = (cur.metadata.generation ?? 1) + 1;
        next.metadata.resourceVersion = String(rv);
        objects.set(keyOf(c, ns, name), next);
        record('MODIFIED', c, next);
        return [200, clone(next)];
      }
      return [200, clone(cur)];
    }
    rv++;
    const gone = clone(cur);
    gone.metadata.resourceVersion = String(rv);
    objects.delete(keyOf(c, ns, name));
    record('DELETED', c, gone);
    return [200, gone];
  }

  function watch(c: Collection, ns: string | undefined, q: URLSearchParams, res: http.ServerResponse): void {
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders(); // the apiserver answers a watch's headers at once, before any event
    const send = (e: Obj) => {
      if (!res.writableEnded) res.write(JSON.stringify(e) + '\n');
    };
    const from = q.get('resourceVersion') ?? '';
    const inScope = (obj: Obj) => !ns || obj.metadata.namespace === ns;
    if (from === '' || from === '0') {
      for (const [k, obj] of objects) if (k.startsWith(`${c.plural}/`) && inScope(obj)) send({ type: 'ADDED', object: clone(obj) });
    } else {
      const n = Number(from);
      if (!Number.isInteger(n) || n < oldestRetained - 1) {
        send({ type: 'ERROR', object: status(410, 'Expired', `too old resource version: ${from} (${oldestRetained - 1})`) });
        res.end();
        return;
      }
      for (const e of events) if (e.rv > n && e.collection === c.plural && inScope(e.obj)) send({ type: e.type, object: clone(e.obj) });
    }
    const w = { collection: c.plural, ns, send, end: () => res.end() };
    watchers.add(w);
    const bookmarks =
      q.get('allowWatchBookmarks') === 'true'
        ? setInterval(
            () => send({ type: 'BOOKMARK', object: { kind: c.kind, apiVersion: `${c.group}/${c.version}`, metadata: { resourceVersion: String(rv) } } }),
            o.bookmarkMs ?? 1000,
          )
        : undefined;
    res.on('close', () => {
      watchers.delete(w);
      if (bookmarks) clearInterval(bookmarks);
    });
  }

  /** /apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/status]] */
  function route(path: string): { c: Collection; ns?: string; name?: string; sub?: 'status' } | undefined {
    const m = /^\/apis\/([^/]+)\/([^/]+)(?:\/namespaces\/([^/]+))?\/([^/]+)(?:\/([^/]+)(?:\/(status))?)?$/.exec(path);
    if (!m) return undefined;
    const c = COLLECTIONS.find((x) => x.group === m[1] && x.version === m[2] && x.plural === m[4]);
    if (!c) return undefined;
    return { c, ns: m[3], name: m[5] ? decodeURIComponent(m[5]) : undefined, sub: m[6] as 'status' | undefined };
  }

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const reply = (code: number, body: Obj, r?: ReturnType<typeof route>, verb = '') => {
      if (r) requests.push({ verb, group: r.c.group, resource: r.sub ? `${r.c.plural}/${r.sub}` : r.c.plural, namespace: r.ns, name: r.name, status: code });
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.headers.authorization !== `Bearer ${token}`) return reply(401, status(401, 'Unauthorized', 'Unauthorized'));
    const r = route(url.pathname);
    if (!r) return reply(404, status(404, 'NotFound', `the server could not find the requested resource (${url.pathname})`));
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => {
      let body: Obj = {};
      if (chunks.length) {
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Obj;
        } catch {
          return reply(400, status(400, 'BadRequest', 'invalid JSON body'), r, req.method?.toLowerCase());
        }
      }
      const ns = r.ns;
      switch (req.method) {
        case 'GET':
          if (r.name) {
            const obj = objects.get(keyOf(r.c, ns ?? '', r.name));
            return obj ? reply(200, clone(obj), r, 'get') : reply(404, status(404, 'NotFound', `${r.c.plural}.${r.c.group} "${r.name}" not found`), r, 'get');
          }
          if (url.searchParams.get('watch') === 'true') {
            requests.push({ verb: 'watch', group: r.c.group, resource: r.c.plural, namespace: ns, status: 200 });
            return watch(r.c, ns, url.searchParams, res);
          }
          return reply(
            200,
            {
              apiVersion: `${r.c.group}/${r.c.version}`,
              kind: `${r.c.kind}List`,
              metadata: { resourceVersion: String(rv) },
              items: [...objects.entries()].filter(([k, o]) => k.startsWith(`${r.c.plural}/`) && (!ns || o.metadata.namespace === ns)).map(([, o]) => clone(o)),
            },
            r,
            'list',
          );
        case 'POST':
          if (!ns || r.name) return reply(405, status(405, 'MethodNotAllowed', 'create needs a namespaced collection'), r, 'create');
          return reply(...create(r.c, ns, body), r, 'create');
        case 'PUT':
          if (!ns || !r.name) return reply(405, status(405, 'MethodNotAllowed', 'update needs a named object'), r, 'update');
          if (r.sub === 'status' && !r.c.statusSubresource) return reply(404, status(404, 'NotFound', 'no status subresource'), r, 'update');
          return reply(...update(r.c, ns, r.name, body, r.sub), r, 'update');
        case 'DELETE':
          if (!ns || !r.name) return reply(405, status(405, 'MethodNotAllowed', 'delete needs a named object'), r, 'delete');
          return reply(...del(r.c, ns, r.name), r, 'delete');
        default:
          return reply(405, status(405, 'MethodNotAllowed', `${req.method} is not supported by this test server`), r, String(req.method).toLowerCase());
      }
    });
  });
  const port = await listen(server, '127.0.0.1:0');
  const collectionOf = (plural: string) => {
    const c = COLLECTIONS.find((x) => x.plural === plural);
    if (!c) throw new Error(`unknown collection ${plural}`);
    return c;
  };

  return {
    url: `http://127.0.0.1:${port}`,
    token,
    requests,
    get: (plural, ns, name) => clone(objects.get(`${plural}/${ns}/${name}`)),
    list: (plural) => [...objects.entries()].filter(([k]) => k.startsWith(`${plural}/`)).map(([, v]) => clone(v)),
    apply(obj) {
      const k = kindOf(obj.kind);
      const c = k ? collectionOf(k.plural) : collectionOf('leases');
      const ns = obj.metadata?.namespace ?? 'default';
      const cur = objects.get(keyOf(c, ns, obj.metadata.name));
      const [code, out] = cur ? update(c, ns, obj.metadata.name, { ...clone(cur), spec: clone(obj.spec) }, undefined) : create(c, ns, obj);
      if (code >= 300) throw new Error(`apply ${obj.kind} ${obj.metadata.name}: ${code} ${out.message}`);
      return out;
    },
    remove(plural, ns, name) {
      const [code, out] = del(collectionOf(plural), ns, name);
      if (code >= 300) throw new Error(`delete ${plural} ${name}: ${code} ${out.message}`);
    },
    compact() {
      events = [];
      oldestRetained = rv + 1;
    },
    dropWatches() {
      for (const w of [...watchers]) w.end();
    },
    resourceVersion: () => rv,
    async close() {
      for (const w of [...watchers]) w.end();
      server.closeAllConnections();
      await closeServer(server);
    },
  };
}
