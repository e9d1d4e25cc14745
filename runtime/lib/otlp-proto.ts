/**
 * Decision spans as OTLP protobuf (`http/protobuf`, the OTLP default): the wire form of an
 * ExportTraceServiceRequest written straight into a buffer, a span at a time, without building
 * objects. Field numbers are those of opentelemetry-proto (collector/trace/v1, trace/v1,
 * common/v1, resource/v1). A batch is one ResourceSpans holding one ScopeSpans: its spans are
 * appended as they end, and the enclosing messages' tags and lengths, known only once the batch
 * is sealed, are written into a gap kept before the first span.
 *
 * A protobuf span is about a third of its JSON (ids are raw bytes, keys are field numbers), so
 * both the encoding and the socket writes of an export cost less (bench/tracing.bench.ts).
 */
import type { DecisionAttributes, DecisionRow } from './decision-spans.js';

type AttrValue = string | number | boolean;

/** A growable output buffer, `at` bytes written: a request body being filled (protobuf or JSON). */
export class ByteWriter {
  buf: Buffer;
  at = 0;

  constructor(size = 64 * 1024) {
    this.buf = Buffer.allocUnsafe(size);
  }

  /** Room for `n` more bytes. */
  ensure(n: number): void {
    if (this.at + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + n));
    this.buf.copy(bigger, 0, 0, this.at);
    this.buf = bigger;
  }

  /** A JSON text, as UTF-8. */
  text(s: string): void {
    this.ensure(s.length * 3);
    this.at += this.buf.write(s, this.at);
  }

  varint(v: number): void {
    // Values here are lengths and small non-negative integers: below 2^31.
    while (v > 0x7f) {
      this.buf[this.at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[this.at++] = v;
  }

  bytes(b: Uint8Array): void {
    this.buf.set(b, this.at);
    this.at += b.length;
  }

  /** A length-delimited field holding `body` (an embedded message's bytes). */
  embedded(tag: number, body: Uint8Array): void {
    this.ensure(body.length + 6);
    this.buf[this.at++] = tag;
    this.varint(body.length);
    this.bytes(body);
  }

  /** A length-delimited string field. Short ASCII is copied by hand: a native call costs more. */
  string(tag: number, s: string): void {
    this.ensure(s.length * 3 + 10);
    this.buf[this.at++] = tag;
    const n = s.length;
    if (n < 128) {
      const start = this.at + 1;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        this.buf[start + i] = c;
      }
      if (i === n) {
        this.buf[this.at] = n;
        this.at = start + n;
        return;
      }
    }
    const len = Buffer.byteLength(s);
    this.varint(len);
    this.at += this.buf.write(s, this.at);
  }

  /** A hex id as its bytes (the id was validated or generated as lowercase hex). */
  hexId(tag: number, hex: string): void {
    const n = hex.length >> 1;
    this.buf[this.at++] = tag;
    this.buf[this.at++] = n;
    for (let i = 0; i < n; i++) this.buf[this.at++] = (HEX[hex.charCodeAt(2 * i)]! << 4) | HEX[hex.charCodeAt(2 * i + 1)]!;
  }

  /** A fixed64 field of `us` microseconds in nanoseconds, exact beyond 2^53. */
  nanos(tag: number, us: number): void {
    this.buf[this.at++] = tag;
    const low = (us % 0x1_0000_0000) * 1000;
    const high = Math.floor(us / 0x1_0000_0000) * 1000 + Math.floor(low / 0x1_0000_0000);
    this.buf.writeUInt32LE(low % 0x1_0000_0000, this.at);
    this.buf.writeUInt32LE(high, this.at + 4);
    this.at += 8;
  }
}

const HEX = new Uint8Array(128);
for (let i = 0; i < 16; i++) HEX['0123456789abcdef'.charCodeAt(i)] = HEX['0123456789ABCDEF'.charCodeAt(i)] = i;

/** Wire types: 0 varint, 1 fixed64, 2 length-delimited. A tag byte is `field << 3 | type`. */
const tag = (field: number, type: 0 | 1 | 2) => (field << 3) | type;

/** A message's bytes, written by `fill` into a buffer of its own. */
function message(fill: (b: ByteWriter) => void): Buffer {
  const b = new ByteWriter(256);
  fill(b);
  return b.buf.subarray(0, b.at);
}

/** `field` as a length-delimited field holding `body`. */
function field(no: number, body: Uint8Array): Buffer {
  return message((b) => b.embedded(tag(no, 2), body));
}

/** A KeyValue (common/v1): key 1, value 2 (AnyValue: string 1, bool 2, int 3, double 4). */
function keyValue(key: string, v: AttrValue): Buffer {
  const value = message((b) => {
    b.ensure(16);
    if (typeof v === 'string') b.string(tag(1, 2), v);
    else if (typeof v === 'boolean') {
      b.buf[b.at++] = tag(2, 0);
      b.buf[b.at++] = v ? 1 : 0;
    } else if (Number.isInteger(v) && v >= 0 && v < 2 ** 31) {
      b.buf[b.at++] = tag(3, 0);
      b.varint(v);
    } else {
      b.buf[b.at++] = tag(4, 1);
      b.buf.writeDoubleLE(v, b.at);
      b.at += 8;
    }
  });
  return message((b) => {
    b.string(tag(1, 2), key);
    b.embedded(tag(2, 2), value);
  });
}

/** The attribute names of a decision span, for one brand: this encoding and decision-spans.ts's JSON write these. */
export function attributeNames(brand: string) {
  return {
    rule: `${brand}.rule`,
    decision: `${brand}.decision`,
    service: `${brand}.service`,
    actor: `${brand}.actor`,
    action: `${brand}.action`,
    reason: `${brand}.reason`,
    status: 'http.response.status_code',
  };
}

/** The constant bytes of each decision attribute: the span's attributes field, up to the value. */
function attributeOpenings(brand: string) {
  // Span.attributes (9) holding KeyValue{key, value: AnyValue{string_value}}: everything but
  // the lengths that depend on the value, which the writer puts in.
  const n = attributeNames(brand);
  const key = (k: string) => message((b) => b.string(tag(1, 2), k));
  return {
    rule: key(n.rule),
    decision: key(n.decision),
    service: key(n.service),
    actor: key(n.actor),
    action: key(n.action),
    reason: key(n.reason),
    allow: keyValue(n.decision, 'allow'),
    deny: keyValue(n.decision, 'deny'),
    status: key(n.status),
  };
}
type Openings = ReturnType<typeof attributeOpenings>;

const SPAN_ATTRIBUTES = tag(9, 2);

/** A string attribute: Span.attributes{ key, value{ string_value } }, lengths written after. */
function stringAttribute(b: ByteWriter, key: Buffer, v: string): void {
  b.ensure(key.length + v.length * 3 + 20);
  b.buf[b.at++] = SPAN_ATTRIBUTES;
  const outer = b.at;
  b.at += 1; // KeyValue length: one byte when short, moved below when not
  b.bytes(key);
  b.buf[b.at++] = tag(2, 2);
  const inner = b.at;
  b.at += 1;
  b.string(tag(1, 2), v);
  settle(b, inner);
  settle(b, outer);
}

/** Writes the length of what follows the one byte kept at `at`, shifting it when the length needs more. */
function settle(b: ByteWriter, at: number): void {
  const len = b.at - at - 1;
  if (len < 128) {
    b.buf[at] = len;
    return;
  }
  const size = varintSize(len);
  b.ensure(size);
  b.buf.copyWithin(at + size, at + 1, b.at);
  const end = b.at + size - 1;
  b.at = at;
  b.varint(len);
  b.at = end;
}

function attributes(b: ByteWriter, a: DecisionAttributes, k: Openings): void {
  if (a.rule !== undefined) stringAttribute(b, k.rule, a.rule);
  if (a.allow !== undefined) b.embedded(SPAN_ATTRIBUTES, a.allow ? k.allow : k.deny);
  if (a.service !== undefined) stringAttribute(b, k.service, a.service);
  if (a.actor !== undefined) stringAttribute(b, k.actor, a.actor);
  if (a.action !== undefined) stringAttribute(b, k.action, a.action);
  if (a.status !== undefined) {
    const status = Number.isInteger(a.status) && a.status >= 0 && a.status < 2 ** 31 ? a.status : 0;
    b.ensure(k.status.length + 12);
    b.buf[b.at++] = SPAN_ATTRIBUTES;
    const outer = b.at++;
    b.bytes(k.status);
    b.buf[b.at++] = tag(2, 2);
    const inner = b.at++;
    b.buf[b.at++] = tag(3, 0);
    b.varint(status);
    settle(b, inner);
    settle(b, outer);
  }
  if (a.reason !== undefined) stringAttribute(b, k.reason, a.reason);
}

/** The encoder of one resource and scope: `begin` a batch, add `span`s, `end` it to get the body. */
export function otlpProto(resource: Record<string, AttrValue>, brand: string) {
  const openings = attributeOpenings(brand);
  // Resource (ResourceSpans.resource = 1) and InstrumentationScope (ScopeSpans.scope = 1).
  const resourceField = field(1, Buffer.concat(Object.entries(resource).map(([k, v]) => field(1, keyValue(k, v)))));
  const scopeField = field(
    1,
    message((b) => b.string(tag(1, 2), brand)),
  );
  /** Room kept before the spans for the request's, ResourceSpans' and ScopeSpans' openings. */
  const gap = resourceField.length + scopeField.length + 12;
  return {
    contentType: 'application/x-protobuf',
    begin(b: ByteWriter): void {
      b.ensure(gap);
      b.at = gap;
    },
    /** ScopeSpans.spans (2): a Span. */
    span(b: ByteWriter, r: DecisionRow): void {
      b.ensure(r.name.length * 3 + 80);
      b.buf[b.at++] = tag(2, 2);
      const start = b.at++;
      b.hexId(tag(1, 2), r.traceId);
      b.hexId(tag(2, 2), r.spanId);
      if (r.parentSpanId) b.hexId(tag(4, 2), r.parentSpanId);
      b.string(tag(5, 2), r.name);
      b.buf[b.at++] = tag(6, 0);
      b.buf[b.at++] = 2; // SPAN_KIND_SERVER
      b.nanos(tag(7, 1), r.start);
      b.nanos(tag(8, 1), r.end);
      attributes(b, r.attrs, openings);
      settle(b, start);
    },
    /** The whole request: the openings written into the gap, right before the spans. */
    end(b: ByteWriter): Buffer {
      const spans = b.at - gap;
      const scopeSpans = scopeField.length + spans;
      const resourceSpans = resourceField.length + 1 + varintSize(scopeSpans) + scopeSpans;
      const head = message((h) => {
        h.buf[h.at++] = tag(1, 2); // ExportTraceServiceRequest.resource_spans
        h.varint(resourceSpans);
        h.bytes(resourceField);
        h.buf[h.at++] = tag(2, 2); // ResourceSpans.scope_spans
        h.varint(scopeSpans);
        h.bytes(scopeField);
      });
      head.copy(b.buf, gap - head.length);
      return b.buf.subarray(gap - head.length, b.at);
    },
  };
}

function varintSize(v: number): number {
  let n = 1;
  while (v > 0x7f) {
    v >>>= 7;
    n++;
  }
  return n;
}
