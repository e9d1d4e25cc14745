/**
 * Envoy's gRPC ext_authz service, `envoy.service.auth.v3.Authorization/Check`, on its own
 * listener (DECISION_GRPC_ADDR, default `:9192`), beside the HTTP `/authz`. Each Check runs the
 * shared decision (`authorize` over the control plane's engine) on the facts /authz would read
 * from the same request (check.ts), so the two transports give the same answer. Also serves the
 * standard `grpc.health.v1.Health` (Check and Watch): SERVING while up, NOT_SERVING once closing.
 * Plaintext (h2c), as Envoy and Istio call in-cluster authorization servers; TLS belongs to the
 * mesh. A Check never fails the RPC: a decision that throws is answered as a deny.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { parseAddr } from '../../lib/config.js';
import { errMsg, logger } from '../../lib/log.js';
import { startDecisionSpan } from '../../lib/tracing.js';
import type { Committed } from '../decision/commit.js';
import { authorize, type DecisionEngine } from '../decision/engine.js';
import { factsFromHeaders } from '../decision/facts.js';
import { askingWithin } from '../decision/gather.js';
import { failedResponse, requestOf, responseOf, tooLargeResponse, type CheckResponse } from './check.js';

const log = logger('authz-grpc');

export const AUTHORIZATION_SERVICE = 'envoy.service.auth.v3.Authorization';
const HEALTH_SERVICE = 'grpc.health.v1.Health';
const PROTO_DIR = fileURLToPath(new URL('./proto', import.meta.url));
/** Field names as in the .proto (`ok_response`), enums as numbers, absent fields left absent. */
const LOAD_OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: Number, defaults: false, oneofs: true, includeDirs: [PROTO_DIR] };

enum Serving {
  SERVING = 1,
  NOT_SERVING = 2,
  SERVICE_UNKNOWN = 3,
}

let loaded: { auth: grpc.ServiceDefinition; health: grpc.ServiceDefinition } | undefined;

/** The service definitions, loaded once from proto/ (shipped beside the code, also in dist/). */
export function serviceDefinitions(): { auth: grpc.ServiceDefinition; health: grpc.ServiceDefinition } {
  if (!loaded) {
    const def = protoLoader.loadSync(['envoy/service/auth/v3/external_auth.proto', 'grpc/health/v1/health.proto'], LOAD_OPTIONS);
    loaded = { auth: def[AUTHORIZATION_SERVICE] as grpc.ServiceDefinition, health: def[HEALTH_SERVICE] as grpc.ServiceDefinition };
  }
  return loaded;
}

export interface ExtAuthzGrpcOptions {
  /** Largest CheckRequest accepted (default 4 MiB: Envoy may forward a buffered body). */
  maxReceiveBytes?: number;
}

export interface ExtAuthzGrpcServer {
  /** Binds a Go-style address (`:9192`, `127.0.0.1:0`) and resolves with the bound port. */
  listen(addr: string): Promise<number>;
  /** Health goes NOT_SERVING, in-flight calls get `graceMs` (default 2 s), then the server stops. */
  close(graceMs?: number): Promise<void>;
}

/** `ip:port` as grpc-js reports a peer -> the address TRUSTED_PROXIES is matched against. */
function peerAddress(peer: string): string | undefined {
  const m = /^(.*):(\d+)$/.exec(peer);
  const host = m ? m[1]! : peer;
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return bare && bare !== 'unknown' ? bare : undefined;
}

function metaValue(md: grpc.Metadata, key: string): string | undefined {
  const v = md.get(key)[0];
  return typeof v === 'string' ? v : undefined;
}

/** One Check: the facts /authz would build, the shared decision, the answer in Envoy's shape. */
function check(engine: DecisionEngine, call: grpc.ServerUnaryCall<unknown, CheckResponse>, reply: grpc.sendUnaryData<CheckResponse>): void {
  const req = requestOf(call.request);
  if (req.tooLarge) return reply(null, tooLargeResponse());
  // Envoy's own span context for this call if it traces, else the downstream request's.
  const own = metaValue(call.metadata, 'traceparent');
  const span = own
    ? startDecisionSpan('authz.grpc', own, metaValue(call.metadata, 'tracestate'))
    : startDecisionSpan('authz.grpc', req.headers.traceparent, req.headers.tracestate);
  const fail = (e: unknown) => {
    log.error('decision failed', { err: errMsg(e) });
    span.end({ allow: false, status: 403 });
    reply(null, failedResponse());
  };
  let decided: Committed | Promise<Committed>;
  try {
    const trustedPeer = engine.trustedPeer(peerAddress(call.getPeer()));
    decided = authorize(
      engine,
      factsFromHeaders(req.headers, { method: req.method, path: req.path, trustedPeer, rawHeaders: req.rawHeaders, body: req.body }),
      askingWithin(engine.gather, span),
    );
  } catch (e) {
    return fail(e);
  }
  const done = (c: Committed) => {
    span.end({ rule: c.decision.rule, allow: c.decision.allow, status: c.decision.status });
    reply(null, responseOf(c));
  };
  if (decided instanceof Promise) decided.then(done, fail);
  else done(decided);
}

export function createExtAuthzGrpcServer(engine: DecisionEngine, opts: ExtAuthzGrpcOptions = {}): ExtAuthzGrpcServer {
  const defs = serviceDefinitions();
  const server = new grpc.Server({ 'grpc.max_receive_message_length': opts.maxReceiveBytes ?? 4 * 1024 * 1024 });
  let serving = false;
  const watchers = new Set<grpc.ServerWritableStream<{ service?: string }, { status: number }>>();
  const statusOf = (service: string | undefined): Serving | undefined => {
    if (service && service !== AUTHORIZATION_SERVICE) return undefined;
    return serving ? Serving.SERVING : Serving.NOT_SERVING;
  };

  server.addService(defs.auth, {
    Check: (call: grpc.ServerUnaryCall<unknown, CheckResponse>, reply: grpc.sendUnaryData<CheckResponse>) => check(engine, call, reply),
  });
  server.addService(defs.health, {
    Check(call: grpc.ServerUnaryCall<{ service?: string }, { status: number }>, reply: grpc.sendUnaryData<{ status: number }>) {
      const status = statusOf(call.request.service);
      if (status === undefined) reply({ code: grpc.status.NOT_FOUND, details: `unknown service ${call.request.service}` });
      else reply(null, { status });
    },
    Watch(call: grpc.ServerWritableStream<{ service?: string }, { status: number }>) {
      call.write({ status: statusOf(call.request.service) ?? Serving.SERVICE_UNKNOWN });
      watchers.add(call);
      call.on('cancelled', () => watchers.delete(call));
    },
  });

  let closing: Promise<void> | undefined;
  return {
    listen(addr) {
      return new Promise((resolve, reject) => {
        const { host, port } = parseAddr(addr);
        const target = `${host.includes(':') ? `[${host}]` : host}:${port}`;
        server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (err, bound) => {
          if (err) return reject(err);
          serving = true;
          resolve(bound);
        });
      });
    },
    close(graceMs = 2000) {
      closing ??= new Promise<void>((resolve) => {
        serving = false;
        for (const w of watchers) {
          w.write({ status: Serving.NOT_SERVING });
          w.end();
        }
        watchers.clear();
        const force = setTimeout(() => server.forceShutdown(), graceMs);
        force.unref();
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      return closing;
    },
  };
}
