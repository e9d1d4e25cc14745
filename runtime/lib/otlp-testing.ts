/**
 * Test helper: decodes OTLP/HTTP trace exports as a collector does, protobuf (with protobufjs,
 * from the opentelemetry-proto messages written out below) or JSON, into one flat span shape;
 * and a receiver that records what arrives.
 */
import http from 'node:http';
import protobuf from 'protobufjs';
import { listen } from './http.js';

/** The parts of opentelemetry-proto (collector/trace/v1, trace/v1, common/v1, resource/v1) a decoder needs; other fields are skipped. */
const PROTO = `
syntax = "proto3";
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message InstrumentationScope { string name = 1; string version = 2; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue { oneof value { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4; } }
message Status { string message = 2; int32 code = 3; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4; string name = 5;
  int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8; repeated KeyValue attributes = 9;
  uint32 dropped_attributes_count = 10; Status status = 15; fixed32 flags = 16;
}
`;
const Request = protobuf.parse(PROTO, { keepCase: false }).root.lookupType('ExportTraceServiceRequest');

export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** SpanKind: 2 server. */
  kind: number;
  /** Nanoseconds since the epoch, as decimal strings (exact). */
  start: string;
  end: string;
  /** The resource's `service.name`, and the instrumentation scope's name. */
  service: string;
  scope: string;
  resource: Record<string, string | number | boolean>;
  attributes: Record<string, string | number | boolean>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  status: number;
}

type AnyValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number };
type KeyValue = { key: string; value?: AnyValue };
interface Doc {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      scope?: { name?: string };
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind?: number;
        startTimeUnixNano: string;
        endTimeUnixNano: string;
        attributes?: KeyValue[];
        status?: { code?: number };
      }[];
    }[];
  }[];
}

const valueOf = (v: AnyValue = {}) => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue ?? ''));
const record = (kvs: KeyValue[] = []) => Object.fromEntries(kvs.map((a) => [a.key, valueOf(a.value)]));

/** The protobuf request as the JSON mapping writes it: hex ids, 64-bit integers as strings. */
function fromProtobuf(body: Buffer): Doc {
  const doc = Request.toObject(Request.decode(body), { longs: String, bytes: Array, defaults: false, oneofs: false }) as Doc;
  const hex = (b: unknown) => (Array.isArray(b) && b.length ? Buffer.from(b as number[]).toString('hex') : undefined);
  for (const rs of doc.resourceSpans ?? [])
    for (const ss of rs.scopeSpans ?? [])
      for (const s of ss.spans ?? []) {
        s.traceId = hex(s.traceId) ?? '';
        s.spanId = hex(s.spanId) ?? '';
        s.parentSpanId = hex(s.parentSpanId);
      }
  return doc;
}

/** Every span of an export body, `content-type` telling protobuf from JSON. */
export function decodeExport(contentType: string | undefined, body: Buffer): OtlpSpan[] {
  const doc = /protobuf/.test(contentType ?? '') ? fromProtobuf(body) : (JSON.parse(body.toString()) as Doc);
  const out: OtlpSpan[] = [];
  for (const rs of doc.resourceSpans ?? []) {
    const resource = record(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId || undefined,
          name: s.name,
          kind: s.kind ?? 0,
          start: String(s.startTimeUnixNano),
          end: String(s.endTimeUnixNano),
          service: String(resource['service.name'] ?? ''),
          scope: ss.scope?.name ?? '',
          resource,
          attributes: record(s.attributes),
          status: s.status?.code ?? 0,
        });
      }
    }
  }
  return out;
}

/** One request the receiver took: its headers and decoded spans. */
export interface Received {
  headers: http.IncomingHttpHeaders;
  spans: OtlpSpan[];
}

/**
 * A minimal OTLP/HTTP trace receiver at `<url>/v1/traces`, answering `status` (in turn, the last
 * one repeating) with `headers`; `spans` is every span received, `got` each request.
 */
export async function otlpReceiver(status: number | number[] = 200, headers: Record<string, string> = {}) {
  const answers = Array.isArray(status) ? [...status] : [status];
  const spans: OtlpSpan[] = [];
  const got: Received[] = [];
  const server = http.createServer((req, res) => {
    // Decoded once whole: a multi-byte character can straddle two chunks.
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const type = req.headers['content-type'];
      const decoded = decodeExport(type, Buffer.concat(chunks));
      got.push({ headers: req.headers, spans: decoded });
      spans.push(...decoded);
      // An empty ExportTraceServiceResponse, in the request's encoding.
      const proto = /protobuf/.test(type ?? '');
      res
        .writeHead(answers.length > 1 ? answers.shift()! : answers[0]!, { 'content-type': proto ? 'application/x-protobuf' : 'application/json', ...headers })
        .end(proto ? '' : '{}');
    });
  });
  const port = await listen(server, '127.0.0.1:0');
  return { url: `http://127.0.0.1:${port}`, spans, got, server };
}
