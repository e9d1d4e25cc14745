/** The SPEC's stdout fallback for traces (no OTLP endpoint): one JSON line per span. */
import { SpanStatusCode } from '@opentelemetry/api';
import { ExportResultCode, hrTimeToMicroseconds, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';

/** One JSON line per span on stdout (the fallback exporter). */
export class JsonLineSpanExporter implements SpanExporter {
  constructor(private readonly write: (line: string) => void = (l) => void process.stdout.write(l)) {}
  export(spans: ReadableSpan[], done: (r: ExportResult) => void): void {
    for (const s of spans) {
      const ctx = s.spanContext();
      this.write(
        JSON.stringify({
          trace: true,
          name: s.name,
          traceId: ctx.traceId,
          spanId: ctx.spanId,
          parentSpanId: s.parentSpanContext?.spanId,
          start: new Date(hrTimeToMicroseconds(s.startTime) / 1000).toISOString(),
          durationMs: hrTimeToMicroseconds(s.duration) / 1000,
          status: s.status.code === SpanStatusCode.ERROR ? 'error' : 'ok',
          attributes: s.attributes,
        }) + '\n',
      );
    }
    done({ code: ExportResultCode.SUCCESS });
  }
  async shutdown(): Promise<void> {}
}
