export { createBundle, defaultCacheDir, readImagesFile } from './create.js';
export { Progress } from './progress.js';
export { TOOL_NAME, TOOL_VERSION } from './version.js';
export type { CreateOptions, CreateResult } from './create.js';
