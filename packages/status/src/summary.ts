import { escapeControls } from '@offline-bundle/oci';
import type { NodeStatus } from './model.js';
import { formatBytes } from './units.js';

function minutes(seconds: number | undefined): string {
  if (seconds === undefined || !Number.isFinite(seconds)) return '';
  if (seconds < 90) return ', less than 2 min left';
  return `, about ${Math.round(seconds / 60)} min left`;
}

/**
 * One sentence a technician with no Kubernetes knowledge can act on, safe to print: the
 * version and failure message come from the bundle and the media (or an older status file).
 */
export function technicianLine(s: NodeStatus, now = new Date()): string {
  return escapeControls(sentence(s, now));
}

function sentence(s: NodeStatus, _now: Date): string {
  const stickIn = s.bundle?.mode === 'media' || s.phase === 'Verifying' || s.phase === 'Staging';
  const keep = stickIn ? ' Do not remove the USB stick.' : '';
  const stick = s.bundle?.mode === 'media' ? ' Do not remove the USB stick.' : ' You may remove the USB stick.';
  const p = s.progress;
  switch (s.phase) {
    case 'Idle':
      return 'Waiting for a USB stick with an update bundle.';
    case 'Verifying':
      if (p.bytesTotal === 0) return `Checking the update${s.bundle?.version ? ` ${s.bundle.version}` : ''}.${keep}`;
      return `Checking the update${s.bundle?.version ? ` ${s.bundle.version}` : ''} (${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}${minutes(p.etaSeconds)}).${keep}`;
    case 'Staging':
      return `Copying ${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}${minutes(p.etaSeconds)}.${keep}`;
    case 'Serving':
    case 'Preloading':
      return `Loading images: ${p.imagesDone} of ${p.imagesTotal} done.${stick}`;
    case 'Pinning':
      return `Finishing up.${stick}`;
    case 'Ready':
      return `Done: update ${s.bundle?.version ?? ''} is loaded on this node. You may remove the USB stick.`.replace('  ', ' ');
    case 'Failed': {
      const failed = s.conditions.find((c) => c.type === 'Failed');
      return `Failed: ${failed?.message ?? 'unknown error'}`;
    }
  }
}
