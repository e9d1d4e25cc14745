/** The model table: a price the budget reservation header cannot carry is refused when the table is loaded, naming the model and the field. */
import { describe, expect, it } from 'vitest';
import { parseConfig, parseConfigText } from './config.js';

const model = (extra: object) => ({ name: 'm', model: 'p', apiBase: 'http://127.0.0.1:1/v1', ...extra });

describe('broker model table', () => {
  it('takes the prices the reservation header carries', () => {
    for (const price of [0, 0.00015, 1.5e-7, 0.000123456789, 1e6]) {
      const c = parseConfig({ models: [model({ priceInputPer1k: price, priceOutputPer1k: price })] });
      expect(c.models[0]?.priceInputPer1k).toBe(price);
    }
  });

  it('refuses a price with more decimals, or larger, than the reservation header carries, naming the model and the field', () => {
    expect(() => parseConfig({ models: [model({ name: 'odd', priceInputPer1k: 0.00001234567890123 })] })).toThrow(
      /models\.0\.priceInputPer1k: model "odd": priceInputPer1k 0\.00001234567890123 must be from 0 to 1000000 USD per 1k tokens, written .* with at most 12 decimal places/,
    );
    expect(() => parseConfigText('models:\n  - {name: ok, model: p}\n  - {name: pricey, model: p, priceInputPer1k: 1, priceOutputPer1k: 2000000}\n')).toThrow(
      /models\.1\.priceOutputPer1k: model "pricey": priceOutputPer1k 2000000 must be from 0 to 1000000/,
    );
  });
});
