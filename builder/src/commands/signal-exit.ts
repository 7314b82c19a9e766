// 128 + the signal's number, as a shell reports a process the signal ended
// SIGHUP (the ssh session went away) stops the work as SIGTERM does: what was written goes
export const SIGNAL_EXIT = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 } as const;
export type StopSignal = keyof typeof SIGNAL_EXIT;
