export { runCli, usageExitCode, ignoreBrokenPipe } from './run-cli.js';
export { manPage, roffText } from './man-page.js';
export { fitToWidth, formatBytes, plural, timeAgo, timeLeft } from './units.js';
export { COMPLETION_SHELLS, addCompletionCommand, completionScript } from './completion.js';
export type { CompletionShell, CompletingCommand } from './completion.js';
export type { ManPageInfo } from './man-page.js';
