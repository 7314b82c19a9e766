export { runCli } from './run-cli.js';
export { manPage } from './man-page.js';
export { fitToWidth, formatBytes, plural, timeAgo, timeLeft } from './units.js';
export { addCompletionCommand } from './completion.js';
