/**
 * Test helper for the tracing tests (tracing-*.test.ts): a caller's W3C trace context, and waiting
 * at an OTLP receiver (otlp-testing.ts) for a parent span and its child.
 */
import { randomBytes } from 'node:crypto';
import type { OtlpSpan } from './otlp-testing.js';
import { eventually } from './poll-testing.js';

/** A fresh sampled `traceparent` (version 00, flags 01) and its trace and span ids. */
export const newTraceparent = () => {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
};

/** Waits until `rx` has at least two spans of the trace (a parent and its child), and returns them. */
export const twoOrMore = (rx: { spans: OtlpSpan[] }, traceId: string, what: string) =>
  eventually(() => {
    const s = rx.spans.filter((x) => x.traceId === traceId);
    return s.length >= 2 ? s : undefined;
  }, what);
