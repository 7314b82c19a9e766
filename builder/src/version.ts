import { createRequire } from 'node:module';

const pkg = createRequire(import.meta.url)('../package.json') as { version: string };
export const TOOL_NAME = 'offline-bundle';
export const TOOL_VERSION = pkg.version;
