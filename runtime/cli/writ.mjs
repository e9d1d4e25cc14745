#!/usr/bin/env node
// `npx writ ...`: the package.json bin. Loads the TypeScript CLI through tsx (as `npm start` does).
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./main.ts');
process.exitCode = await main(process.argv.slice(2));
