/** OpenAPI building blocks shared by the enterprise routes (directory, identity, keys). */
import { z } from '@hono/zod-openapi';

export const ErrorBody = z.object({ error: z.object({ code: z.string(), message: z.string() }) });
export const ValidationBody = z.object({
  detail: z.array(
    z.object({
      loc: z.array(z.union([z.string(), z.number()])),
      msg: z.string(),
      type: z.string(),
      input: z.unknown().optional(),
      ctx: z.record(z.string(), z.unknown()).optional(),
    }),
  ),
});

export const json = <T extends z.ZodType>(schema: T, description = 'OK') => ({ description, content: { 'application/json': { schema } } });
export const body = <T extends z.ZodType>(schema: T) => ({ required: true, content: { 'application/json': { schema } } });
export const errorResponse = (description: string) => json(ErrorBody, description);
export const invalid = { 422: json(ValidationBody, 'Validation error') } as const;

/** Tenant ids become part of subjects and group keys: no ':' and no whitespace. */
export const TenantId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits and . _ - only, starting with a letter or digit');

export const Limit = (dflt: number, max: number) => z.coerce.number().int().min(1).max(max).default(dflt);
