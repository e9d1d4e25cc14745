import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['**/*.test.ts'],
    exclude: ['node_modules/**', '.git/**', 'dist/**', '.data/**', '.artifacts/**'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // 2-core machines: bounded parallelism keeps socket tests deterministic.
    maxWorkers: 2,
    reporters: ['default', './vitest.summary.ts'],
  },
});
