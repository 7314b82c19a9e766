import type { BundleSource } from '@offline-bundle/format';
import type { StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import type { Logger } from '../log.js';
import type { RuntimeTarget } from '../runtime/runtime-target.js';

/** What every phase of a load shares: the config, the log, the status, the runtime. */
export interface PipelineContext {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  runtime: RuntimeTarget;
  /** Where the file came from, for status ("USB stick LABEL", a mount point, "file"). */
  media?: string;
  /** The other nodes a layout fetched from peers came from (status bundle.fromPeers). */
  fromPeers?: string[];
  /** Aborts the load (SIGTERM): the cleanup of every step still runs. */
  signal?: AbortSignal;
  /** The running agent's version, which a bundle's agent image must be newer than to switch (default TOOL_VERSION). */
  agentVersion?: string;
  /** The daemon serves the release after Ready until the cluster completed it (kept-serving.ts): its layout is kept for that. */
  servesAfter?: boolean;
  /** Where the bundle's bytes come from (default: the file, or the parts it names, openBundle); the load closes what it opens. */
  openBundle?: (file: string) => Promise<BundleSource>;
  /** Each step a load passes through, by name (tests: that every origin takes the same steps). */
  onStep?: (step: LoadStep) => void;
}

/** The steps of a load every origin passes through once its bytes are being staged (onStep). */
export type LoadStep =
  | 'admit'
  | 'plan-space'
  | 'clear-partials'
  | 'write-entries'
  | 'finish-layout'
  | 'open-store'
  | 'load-images'
  | 'record-release';
