import { escapeControls } from '@offline-bundle/host';
import type {
  Condition,
  ConditionType,
  NodeStatus,
  Phase,
  Progress,
  RuntimeHoldings,
} from './model.js';
import { technicianLine } from './summary.js';

/**
 * Holds one node's status and hands a copy to every sink on each change. Conditions keep
 * their lastTransitionTime unless their status changes, as Kubernetes conditions do.
 */
export class StatusTracker {
  private readonly sinks: ((s: NodeStatus) => void)[] = [];

  constructor(
    private status: NodeStatus,
    private readonly clock: () => Date = () => new Date(),
  ) {}

  get current(): NodeStatus {
    return structuredClone(this.status);
  }

  /**
   * Calls `sink` with a copy of the status after every change. With `replay`, also right away
   * with the current status (for sinks wired after the tracker was set up).
   */
  onChange(sink: (s: NodeStatus) => void, opts: { replay?: boolean } = {}): void {
    this.sinks.push(sink);
    if (opts.replay) sink(this.current);
  }

  update(fn: (s: NodeStatus) => void): void {
    fn(this.status);
    this.status.updatedAt = this.clock().toISOString();
    this.status.message = technicianLine(this.status, this.clock());
    const copy = this.current;
    for (const sink of this.sinks) sink(copy);
  }

  phase(phase: Phase): void {
    this.update((s) => {
      s.phase = phase;
    });
  }

  condition(
    type: ConditionType,
    status: Condition['status'],
    reason: string,
    message: string,
  ): void {
    // Messages quote file names and bundle strings; kubectl describe and the status file show them as is.
    message = escapeControls(message);
    this.update((s) => {
      const now = this.clock().toISOString();
      const existing = s.conditions.find((c) => c.type === type);
      if (existing) {
        if (existing.status !== status) existing.lastTransitionTime = now;
        Object.assign(existing, { status, reason, message });
      } else {
        s.conditions.push({ type, status, reason, message, lastTransitionTime: now });
      }
    });
  }

  /** An attempt ended in failure, for one reason: Failed, Ready False with the same words, phase Failed. */
  failed(reason: string, message: string): void {
    this.condition('Failed', 'True', reason, message);
    this.condition('Ready', 'False', reason, message);
    this.phase('Failed');
  }

  /** What the runtime holds, as last read (status.runtime); undefined takes it away. */
  runtime(h: RuntimeHoldings | undefined): void {
    this.update((s) => {
      if (h) s.runtime = structuredClone(h);
      else delete s.runtime;
    });
  }

  progress(p: Partial<Progress>): void {
    this.update((s) => {
      Object.assign(s.progress, p);
    });
  }
}
