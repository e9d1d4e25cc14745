/**
 * Decision spans: the hot path's share of tracing, one span per decision (`/authz`, gRPC Check,
 * proxy, broker), recorded as a compact row and written to the OTLP/HTTP endpoint by this small
 * writer, as protobuf (`otlp-proto.ts`, the default) or JSON (below).
 *
 * Why not the SDK's span and exporter for these: a general SDK span (sampler, span limits,
 * attribute validation, a processor chain) and the exporter's object-building serializer cost
 * ~20 µs of CPU a span measured alone (the span ~6, serializing and sending the rest); a row
 * costs ~0.4 µs, its protobuf ~0.6 and its JSON ~1.6 (bench/tracing.bench.ts measures the whole
 * path in a server). The spans are ordinary OTLP spans of the same trace, resource and endpoint: the row's
 * span context is what `run` makes active, so spans the SDK makes inside a decision
 * (identity-authority operations) and outgoing calls (`injectTrace`) are its children.
 * Everything else is traced by the SDK (`tracing.ts`).
 *
 * Like the SDK's batch processor: spans are queued (bounded, `maxQueue`; beyond it a span is
 * dropped and counted), sent in batches of `batchSize` once that many are queued or every
 * `delayMs`, one request at a time. As the OTLP spec asks, a transient failure (no answer, 429,
 * 502, 503, 504) is retried, `retries` times with a doubling pause from `retryDelayMs` (or the
 * endpoint's `Retry-After`, up to 5 s); while a batch waits, new spans queue behind it up to
 * `maxQueue` and are dropped beyond it, so a collector that is down never grows a backlog. A
 * batch that still fails, or is refused for good, is dropped and logged (at most once a minute).
 * Telemetry never holds up a decision.
 */
import { randomBytes } from 'node:crypto';
import { Pool } from 'undici';
import { errMsg, logger } from './log.js';
import { attributeNames, ByteWriter, otlpProto } from './otlp-proto.js';
import { OTLP_PROTOCOLS, type OtlpProtocol } from './tracing-config.js';

const log = logger('tracing');

export interface DecisionAttributes {
  rule?: string;
  allow?: boolean;
  service?: string;
  actor?: string;
  action?: string;
  status?: number;
  reason?: string;
}

/** One finished decision span. Times are epoch microseconds (integers: exact in a double). */
export interface DecisionRow {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  start: number;
  end: number;
  attrs: DecisionAttributes;
}

// --- ids and time ---------------------------------------------------------------------------

const ZERO_SPAN = '0'.repeat(16);
const ZERO_TRACE = '0'.repeat(32);
/** 4 KiB from the CSPRNG as hex, cut into ids: a slice of a string costs no native call or copy. */
let pool = '';
let at = 0;

/** `bytes` random bytes as hex (never all zero: an invalid W3C id), from a pooled CSPRNG buffer. */
export function randomId(bytes: 8 | 16): string {
  for (;;) {
    if (at + 2 * bytes > pool.length) {
      pool = randomBytes(4096).toString('hex');
      at = 0;
    }
    const id = pool.slice(at, (at += 2 * bytes));
    if (id !== ZERO_SPAN && id !== ZERO_TRACE) return id;
  }
}

const origin = performance.timeOrigin;
/** Now, in epoch microseconds. */
export const nowUs = (): number => Math.round((origin + performance.now()) * 1000);

// --- OTLP JSON ------------------------------------------------------------------------------
// Built as one string per span from constant pieces: a span's JSON is ~700 bytes, and general
// object-to-JSON building was most of what a span cost.

type AttrValue = string | number | boolean;

/** A JSON string literal: quoted as is when nothing needs escaping (the common case), else JSON.stringify. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what must be escaped
const PLAIN = /^[^"\\\u0000-\u001f\ud800-\udfff]*$/;
const str = (v: string): string => (PLAIN.test(v) ? `"${v}"` : JSON.stringify(v));

function anyValue(v: AttrValue): string {
  if (typeof v === 'string') return `{"stringValue":${str(v)}}`;
  if (typeof v === 'boolean') return `{"boolValue":${v}}`;
  if (Number.isInteger(v)) return `{"intValue":${v}}`;
  return Number.isFinite(v) ? `{"doubleValue":${v}}` : `{"stringValue":"${v}"}`;
}

const attr = (key: string, v: AttrValue): string => `{"key":${str(key)},"value":${anyValue(v)}}`;

/** The opening of each decision attribute, up to its string value, for one brand. */
function keysOf(brand: string) {
  const n = attributeNames(brand);
  const open = (key: string) => `{"key":${str(key)},"value":{"stringValue":`;
  return {
    rule: open(n.rule),
    decision: open(n.decision),
    service: open(n.service),
    actor: open(n.actor),
    action: open(n.action),
    reason: open(n.reason),
    status: `{"key":${str(n.status)},"value":{"intValue":`,
  };
}
type Keys = ReturnType<typeof keysOf>;

/** The OTLP attributes of a decision span (without the brackets). */
function attributesOf(a: DecisionAttributes, k: Keys): string {
  let out = '';
  if (a.rule !== undefined) out += `,${k.rule}${str(a.rule)}}}`;
  if (a.allow !== undefined) out += `,${k.decision}${a.allow ? '"allow"' : '"deny"'}}}`;
  if (a.service !== undefined) out += `,${k.service}${str(a.service)}}}`;
  if (a.actor !== undefined) out += `,${k.actor}${str(a.actor)}}}`;
  if (a.action !== undefined) out += `,${k.action}${str(a.action)}}}`;
  if (a.status !== undefined) out += `,${k.status}${Number.isInteger(a.status) ? a.status : 0}}}`;
  if (a.reason !== undefined) out += `,${k.reason}${str(a.reason)}}}`;
  return out.slice(1);
}

/** Microseconds as a decimal string of nanoseconds, exact past 2^53. */
const nanos = (us: number): string => (us === 0 ? '0' : `${us}000`);

/** One span of an ExportTraceServiceRequest (OTLP JSON: hex ids, kind SERVER = 2, times in ns). */
function spanJson(r: DecisionRow, k: Keys): string {
  const parent = r.parentSpanId ? `"parentSpanId":"${r.parentSpanId}",` : '';
  return (
    `{"traceId":"${r.traceId}","spanId":"${r.spanId}",${parent}"name":${str(r.name)},"kind":2,` +
    `"startTimeUnixNano":"${nanos(r.start)}","endTimeUnixNano":"${nanos(r.end)}","attributes":[${attributesOf(r.attrs, k)}],"status":{}}`
  );
}

/** The pieces of an ExportTraceServiceRequest for one resource and instrumentation scope (`brand`). */
export function otlpJson(resource: Record<string, AttrValue>, brand: string): { head: string; span: (r: DecisionRow) => string; tail: string } {
  const keys = keysOf(brand);
  const res = Object.entries(resource)
    .map(([key, v]) => attr(key, v))
    .join(',');
  return {
    head: `{"resourceSpans":[{"resource":{"attributes":[${res}]},"scopeSpans":[{"scope":{"name":${str(brand)}},"spans":[`,
    span: (r) => spanJson(r, keys),
    tail: ']}]}]}',
  };
}

/** How a batch is written: opened, a span at a time, closed into the request body. */
export interface SpanEncoder {
  contentType: string;
  begin(w: ByteWriter): void;
  /** Appends a span; `first` when it is the batch's first. */
  span(w: ByteWriter, r: DecisionRow, first: boolean): void;
  end(w: ByteWriter): Buffer;
}

/** `otlpJson` as an encoder (`http/json`). */
function jsonEncoder(resource: Record<string, AttrValue>, brand: string): SpanEncoder {
  const json = otlpJson(resource, brand);
  return {
    contentType: 'application/json',
    begin: (w) => {
      w.at = 0;
      w.text(json.head);
    },
    span: (w, r, first) => w.text(first ? json.span(r) : `,${json.span(r)}`),
    end: (w) => {
      w.text(json.tail);
      return w.buf.subarray(0, w.at);
    },
  };
}

/** A request body being written: `count` spans so far. */
interface Body {
  w: ByteWriter;
  count: number;
}

// --- the writer -----------------------------------------------------------------------------

export interface DecisionSpanWriterOptions {
  /** `<endpoint>/v1/traces`. */
  url: string;
  headers?: Record<string, string>;
  resource: Record<string, AttrValue>;
  brand: string;
  /** `OTEL_EXPORTER_OTLP_PROTOCOL`: protobuf (the OTLP default) or JSON. */
  protocol?: OtlpProtocol;
  maxQueue?: number;
  batchSize?: number;
  delayMs?: number;
  timeoutMs?: number;
  /** Retries of a batch after a transient failure (default 2; none once closing). */
  retries?: number;
  /** Pause before the first retry, doubled for each next (default 1000 ms). */
  retryDelayMs?: number;
}

/** Answers the OTLP spec calls transient: worth a retry. */
const RETRYABLE = new Set([429, 502, 503, 504]);
/** The longest `Retry-After` honoured. */
const MAX_RETRY_AFTER_MS = 5000;

/** What one export attempt came to. */
type Outcome = { ok: true } | { ok: false; retryable: boolean; error: Error; retryAfterMs?: number };

/**
 * Each span is encoded into the body being filled as it ends, so nothing of it outlives the
 * request: rows kept for the batch's ~50 ms survived young-generation collections and were
 * promoted, a cost the collector took on the request thread. Bodies are reused once sent.
 */
export class DecisionSpanWriter {
  private filling: Body | undefined;
  private readonly full: { body: Body; payload: Buffer }[] = [];
  private readonly spare: Body[] = [];
  /** Spans in `filling` and `full`. */
  private queued = 0;
  private sending: Promise<void> | undefined;
  private readonly timer: NodeJS.Timeout;
  /** One keep-alive connection to the endpoint: exports go one at a time. */
  private readonly pool: Pool;
  private readonly path: string;
  private readonly o: Required<DecisionSpanWriterOptions>;
  private readonly encoder: SpanEncoder;
  private lastWarn = 0;
  private closing = false;
  /** Ends a retry's pause (close). */
  private wake: (() => void) | undefined;
  /** Rows dropped because the queue was full or their export failed. */
  dropped = 0;

  constructor(opts: DecisionSpanWriterOptions) {
    this.o = {
      headers: {},
      protocol: OTLP_PROTOCOLS[0],
      maxQueue: 8192,
      batchSize: 512,
      delayMs: 1000,
      timeoutMs: 5000,
      retries: 2,
      retryDelayMs: 1000,
      ...opts,
    };
    const url = new URL(this.o.url);
    this.pool = new Pool(url.origin, { connections: 1 });
    this.path = url.pathname + url.search;
    this.encoder = this.o.protocol === 'http/json' ? jsonEncoder(this.o.resource, this.o.brand) : otlpProto(this.o.resource, this.o.brand);
    this.timer = setInterval(() => void this.flush(), this.o.delayMs).unref();
  }

  add(row: DecisionRow): void {
    if (this.queued >= this.o.maxQueue) {
      this.dropped++;
      return;
    }
    let b = this.filling;
    if (!b) {
      b = this.filling = this.spare.pop() ?? { w: new ByteWriter(), count: 0 };
      this.encoder.begin(b.w);
    }
    this.encoder.span(b.w, row, b.count === 0);
    b.count++;
    this.queued++;
    if (b.count >= this.o.batchSize) {
      this.seal();
      if (!this.sending) void this.flush(false);
    }
  }

  /** Closes the body being filled and queues it for sending. */
  private seal(): void {
    const b = this.filling;
    if (!b) return;
    this.full.push({ body: b, payload: this.encoder.end(b.w) });
    this.filling = undefined;
  }

  /**
   * Sends the full bodies, one at a time, after the export already running; `all` (the timer,
   * shutdown, tests) first closes the one being filled, else (a batch filled) it waits.
   */
  async flush(all = true): Promise<void> {
    while (this.sending) await this.sending;
    if (all) this.seal();
    for (let b = this.full.shift(); b; b = this.full.shift()) {
      this.sending = this.send(b.body, b.payload);
      try {
        await this.sending;
      } finally {
        this.sending = undefined;
      }
    }
  }

  /**
   * Stops the timer and sends what is queued; once an export fails, the rest is dropped (and
   * counted) rather than each batch waiting out its own timeout: shutdown is bounded by one.
   */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.closing = true;
    this.wake?.();
    await this.flush();
    await this.pool.destroy();
  }

  private async send(b: Body, payload: Buffer): Promise<void> {
    try {
      for (let attempt = 0; ; attempt++) {
        const out = await this.post(payload);
        if (out.ok) break;
        if (!out.retryable || attempt >= this.o.retries || this.closing) throw out.error;
        // The pause ends early when the writer closes: one last attempt, then the rest is dropped.
        await new Promise<void>((r) => {
          const t = setTimeout(r, out.retryAfterMs ?? this.o.retryDelayMs * 2 ** attempt);
          this.wake = () => {
            clearTimeout(t);
            r();
          };
        });
        this.wake = undefined;
      }
    } catch (e) {
      this.dropped += b.count;
      if (this.closing) this.dropWaiting();
      if (Date.now() - this.lastWarn >= 60_000) {
        this.lastWarn = Date.now();
        log.warn('decision spans not exported', { spans: b.count, droppedSoFar: this.dropped, error: errMsg(e) });
      }
    } finally {
      // Answered (or given up on): the buffer is free again.
      this.queued -= b.count;
      b.w.at = 0;
      b.count = 0;
      if (this.spare.length < 2) this.spare.push(b);
    }
  }

  /** Drops (and counts) every span not yet sent. */
  private dropWaiting(): void {
    for (const { body } of this.full.splice(0)) {
      this.dropped += body.count;
      this.queued -= body.count;
    }
    if (this.filling) {
      this.dropped += this.filling.count;
      this.queued -= this.filling.count;
      this.filling = undefined;
    }
  }

  private async post(body: Buffer): Promise<Outcome> {
    let status: number;
    let retryAfter: string | string[] | undefined;
    try {
      const res = await this.pool.request({
        method: 'POST',
        path: this.path,
        headers: { ...this.o.headers, 'content-type': this.encoder.contentType },
        body,
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
      await res.body.dump();
      status = res.statusCode;
      retryAfter = res.headers['retry-after'];
    } catch (e) {
      // No answer (refused, reset, timed out): transient.
      return { ok: false, retryable: true, error: e instanceof Error ? e : new Error(String(e)) };
    }
    if (status < 300) return { ok: true };
    const seconds = typeof retryAfter === 'string' && /^\d{1,4}$/.test(retryAfter) ? Number(retryAfter) * 1000 : undefined;
    return {
      ok: false,
      retryable: RETRYABLE.has(status),
      error: new Error(`OTLP endpoint answered ${status}`),
      ...(seconds === undefined ? {} : { retryAfterMs: Math.min(seconds, MAX_RETRY_AFTER_MS) }),
    };
  }
}
