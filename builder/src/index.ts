export { Progress, formatProgressLine } from './progress.js';
