/**
 * Model table of the broker: logical model names (what agents ask for and what the registry's
 * `allowModels` lists) mapped to a provider model, its API base and a per-1k-token price.
 * Loaded once from a YAML or JSON file (BROKER_CONFIG); parsing is pure and strict.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { isReservePrice, RESERVE_PRICE_RULE } from '../lib/reservation-header.js';
import { RegistryName } from '../control-plane/types.js';

export const PROVIDERS = ['openai'] as const;

export const ModelSchema = z
  .object({
    /** Logical name: the registry name of the `kind: model` service. */
    name: RegistryName,
    /** Wire protocol of the upstream; `openai` covers every OpenAI-compatible server. */
    provider: z.enum(PROVIDERS).default('openai'),
    /** Provider-side model id sent upstream. */
    model: z.string().min(1).max(253),
    /** Base URL up to and including the version segment, e.g. https://api.openai.com/v1. */
    apiBase: z
      .url({ protocol: /^https?$/ })
      .default('https://api.openai.com/v1')
      .transform((u) => u.replace(/\/+$/, '')),
    /** USD per 1000 prompt tokens. */
    priceInputPer1k: z.number().nonnegative().finite().default(0),
    /** USD per 1000 completion tokens. */
    priceOutputPer1k: z.number().nonnegative().finite().default(0),
    /** The model's output cap (tokens): the worst case reserved when a request sets no max_tokens. */
    maxOutputTokens: z.number().int().positive().max(10_000_000).default(16_384),
  })
  .strict();
export type ModelEntry = z.infer<typeof ModelSchema>;

export const BrokerConfigSchema = z
  .object({
    models: z.array(ModelSchema).max(10_000),
  })
  .strict()
  .superRefine((c, ctx) => {
    const seen = new Set<string>();
    c.models.forEach((m, i) => {
      if (seen.has(m.name)) ctx.addIssue({ code: 'custom', path: ['models', i, 'name'], message: `duplicate model name ${JSON.stringify(m.name)}` });
      seen.add(m.name);
      // Every call's budget reservation carries the prices (X-Writ-Reserve): one the header cannot
      // carry would have every call to the model refused, so the table is refused instead.
      for (const k of ['priceInputPer1k', 'priceOutputPer1k'] as const) {
        if (!isReservePrice(m[k]))
          ctx.addIssue({ code: 'custom', path: ['models', i, k], message: `model ${JSON.stringify(m.name)}: ${k} ${m[k]} must be ${RESERVE_PRICE_RULE}` });
      }
    });
  });
export type BrokerConfig = z.infer<typeof BrokerConfigSchema>;

/** The model table bundled with the broker (used when BROKER_CONFIG is unset). */
export const DEFAULT_CONFIG_PATH = fileURLToPath(new URL('./models.yaml', import.meta.url));

/** Validates a parsed config; throws one readable Error listing every problem. */
export function parseConfig(raw: unknown, source = 'broker config'): BrokerConfig {
  const r = BrokerConfigSchema.safeParse(raw);
  if (r.success) return r.data;
  const lines = r.error.issues.map((i) => `  ${i.path.join('.') || '(root)'}: ${i.message}`);
  throw new Error(`invalid ${source}:\n${lines.join('\n')}`);
}

/** Parses YAML (a superset of JSON) text. */
export function parseConfigText(text: string, source = 'broker config'): BrokerConfig {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    throw new Error(`${source} is not valid YAML/JSON: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  return parseConfig(raw, source);
}

export function loadConfigFile(path: string): BrokerConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(`cannot read broker config ${path}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  return parseConfigText(text, `broker config ${path}`);
}

/** Name -> entry, for the hot path. */
export function modelTable(config: BrokerConfig): ReadonlyMap<string, ModelEntry> {
  return new Map(config.models.map((m) => [m.name, m]));
}
