/**
 * Pieces the HTTP benchmarks share: the bare node:http baseline server and the autocannon
 * loader with the part of its result the benches read.
 */
import http from 'node:http';

export interface AutocannonResult {
  requests: { average: number; total: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
}
export type Autocannon = (o: Record<string, unknown>) => Promise<AutocannonResult>;

/** autocannon (a devDependency, loaded only by the driving process). */
export async function loadAutocannon(): Promise<Autocannon> {
  const spec = 'autocannon';
  return ((await import(spec)) as { default: Autocannon }).default;
}

/**
 * The baseline: answers 200 `{}` at once, or once the body is read when the request has one.
 * Keep-alive as long as the servers under test keep it.
 */
export function bareServer(): http.Server {
  return http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const answer = () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': 2 });
      res.end('{}');
    };
    req.resume();
    if (req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined) answer();
    else req.on('end', answer);
  });
}
