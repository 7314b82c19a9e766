export { createBundle, defaultCacheDir } from './create.js';
export { readImagesFile, checkSources } from './inputs.js';
export { Progress, formatProgressLine } from './progress.js';
export { TOOL_NAME, TOOL_VERSION } from './version.js';
export type { CreateOptions, CreateResult } from './create.js';
