import { createRequire } from 'node:module';

export const TOOL_VERSION = (
  createRequire(import.meta.url)('../package.json') as { version: string }
).version;
