import { escapeControls } from '@offline-bundle/host';
import type { NodeStatus, PeerCopies } from './model.js';
import {
  failureSentence,
  fileWords,
  fromSpool,
  KEPT_COPY_MEDIA,
  onRemovableMedia,
  PART_COLLECTING_REASONS,
  PEER_MEDIA,
  WAITING_SENTENCES,
} from './reasons.js';
import { formatBytes, plural, timeLeft } from '@offline-bundle/cli';

function minutes(seconds: number | undefined): string {
  // all copied: nothing is left to promise
  if (seconds === undefined || !Number.isFinite(seconds) || seconds <= 0) return '';
  return `, ${timeLeft(seconds)}`;
}

/**
 * One sentence a technician with no Kubernetes knowledge can act on, safe to print: the
 * version and failure message come from the bundle and the media (or an older status file).
 */
export function technicianLine(s: NodeStatus, now = new Date()): string {
  return escapeControls(sentence(s, now) + ignoredNote(s));
}

/** A stick holding a release the admin forgot on this node, or a cut copy: said beside the state, which it does not change. */
function ignoredNote(s: NodeStatus): string {
  if (s.phase !== 'Idle' && s.phase !== 'Ready' && s.phase !== 'Failed') return '';
  const saidAlready =
    s.phase === 'Failed' &&
    s.conditions.some((c) => c.type === 'Failed' && c.reason === 'Truncated');
  if (
    !saidAlready &&
    s.conditions.some((c) => c.type === 'MediaIncomplete' && c.status === 'True')
  ) {
    return ' An update file found is incomplete and was not loaded: copy it again and wait until the copy has finished.';
  }
  if (s.phase === 'Failed') return '';
  if (!s.conditions.some((c) => c.type === 'MediaDetected' && c.reason === 'ReleaseForgotten'))
    return '';
  // the bundle shown is not the one ignored (a stick or a drop directory): the words fit both
  return ' The update found was not loaded: the administrator removed it from this node.';
}

function sentence(s: NodeStatus, _now: Date): string {
  // read from the part spool on the node's disk: no stick is read, whatever the mode
  const spooled = fromSpool(s.bundle?.media);
  // fetched from other nodes, or tried again from the copy a failed load kept: no stick is read
  const fromPeers = s.bundle?.media === PEER_MEDIA;
  const keptCopy = s.bundle?.media === KEPT_COPY_MEDIA;
  const stickIn =
    !spooled &&
    !fromPeers &&
    !keptCopy &&
    (s.bundle?.mode === 'media' || s.phase === 'Verifying' || s.phase === 'Staging');
  const keep = stickIn ? ' Do not remove the USB stick.' : '';
  const stick = fromPeers
    ? ''
    : s.bundle?.mode === 'media' && !spooled
      ? ' Do not remove the USB stick.'
      : ' You may remove the USB stick.';
  const p = s.progress;
  const collecting =
    (s.phase === 'Idle' || s.phase === 'Staging') &&
    s.conditions.find((c) => c.type === 'MediaDetected' && PART_COLLECTING_REASONS.has(c.reason));
  if (collecting) return collecting.message;
  switch (s.phase) {
    case 'Idle': {
      const removed =
        s.bundle?.version &&
        s.conditions.some((c) => c.type === 'Ready' && c.reason === 'ReleaseForgotten');
      return `${removed ? `Update ${s.bundle!.version} was removed from this node by the administrator. ` : ''}Waiting for a USB stick with an update bundle.`;
    }
    case 'Verifying': {
      const waiting = s.conditions.find(
        (c) =>
          c.type === 'Ready' && c.status === 'False' && Object.hasOwn(WAITING_SENTENCES, c.reason),
      );
      if (waiting) return WAITING_SENTENCES[waiting.reason]!;
      if (p.bytesTotal === 0)
        return `Checking the update${s.bundle?.version ? ` ${s.bundle.version}` : ''}.${keep}`;
      return `Checking the update${s.bundle?.version ? ` ${s.bundle.version}` : ''} (${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}${minutes(p.etaSeconds)}).${keep}`;
    }
    case 'Staging':
      if (fromPeers)
        return `Fetching the update${s.bundle?.version ? ` ${s.bundle.version}` : ''} from other nodes (${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}${minutes(p.etaSeconds)}).`;
      return `Copying ${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}${minutes(p.etaSeconds)}.${keep}`;
    case 'Serving':
    case 'Preloading':
      return `Loading images: ${p.imagesDone} of ${p.imagesTotal} done.${stick}`;
    case 'Pinning':
      return `Finishing up.${stick}`;
    case 'Ready':
      return readySentence(s, fromPeers);
    case 'Failed':
      return failedSentence(s, fromPeers);
  }
}

/** Loaded, or checked but not loaded: and whether the stick may go. */
function readySentence(s: NodeStatus, fromPeers: boolean): string {
  if (s.conditions.some((c) => c.type === 'Preloaded' && c.reason === 'PreloadDisabled')) {
    return `Checked: update ${s.bundle?.version ?? ''} is valid, but it was NOT loaded on this node (loading is turned off in the node's settings).${fromPeers ? '' : ' You may remove the USB stick.'}`.replace(
      '  ',
      ' ',
    );
  }
  if (s.conditions.some((c) => c.type === 'Ready' && c.reason === 'Restored')) {
    return `Done: update ${s.bundle?.version ?? ''} is loaded on this node again (parts of it had gone missing and were put back from this node's disk). No USB stick is needed.`.replace(
      '  ',
      ' ',
    );
  }
  // the agent restarts into a newer version the bundle brought: for a moment it is not running
  if (s.conditions.some((c) => c.type === 'AgentUpgraded' && c.status === 'Unknown')) {
    return `Done: update ${s.bundle?.version ?? ''} is loaded on this node. ${readyStickWords(s)} The update program is restarting in its new version.`.replace(
      '  ',
      ' ',
    );
  }
  return `Done: update ${s.bundle?.version ?? ''} is loaded on this node. ${readyStickWords(s)}`.replace(
    '  ',
    ' ',
  );
}

/** What failed, or that a load goes on by itself, in the words the media calls for. */
function failedSentence(s: NodeStatus, fromPeers: boolean): string {
  const failed = s.conditions.find((c) => c.type === 'Failed');
  // a fetch from peers goes on by itself at the agent's next look: no stick to plug in
  if (fromPeers && failed?.reason === 'Interrupted')
    return 'Stopped: the update was being fetched from other nodes when the update program stopped; it goes on by itself once the program runs again.';
  // the copy on the node's disk was whole before it failed, and is tried again (the stick could go once it was whole)
  if (s.conditions.some((c) => c.type === 'Staged' && c.reason === 'KeptForRetry')) {
    return `Not done yet: loading the update${s.bundle?.version ? ` ${s.bundle.version}` : ''} into this node failed; it is tried again by itself from the copy on this node's disk. You may remove the USB stick. If it keeps failing, ask the administrator.`;
  }
  const why = failureSentence(failed?.reason) ?? failed?.message ?? 'unknown error';
  return `Failed: ${onRemovableMedia(s.bundle?.media) ? why : fileWords(why)}`;
}

/**
 * Whether the stick may go once this node is Ready. With peers enabled (status.copies), the
 * stick node is the source of the other nodes (status.peers.copies): the words say how many of them hold a whole copy,
 * so the stick leaves only once the bundle no longer rests on this one node.
 */
function readyStickWords(s: NodeStatus): string {
  if (s.bundle?.media === PEER_MEDIA)
    return 'It was fetched from other nodes: no USB stick is needed.';
  // a file given by hand or dropped in a directory: no stick the other nodes could need
  if (!s.peers || !onRemovableMedia(s.bundle?.media)) return 'You may remove the USB stick.';
  const c: PeerCopies | undefined =
    s.peers.copies?.version === s.bundle?.version ? s.peers.copies : undefined;
  // peers enabled, not yet counted for this bundle (the count follows the load within seconds)
  if (!c) return 'Checking which other nodes have a copy before the USB stick may go.';
  if (c.nodes > 0)
    return `You may remove the USB stick: ${plural(c.nodes, 'other node has', 'other nodes have')} a complete copy.`;
  if (c.serving)
    return 'Keep the USB stick in until another node has a copy: none has a complete copy yet (this node is passing the update on).';
  return 'You may remove the USB stick, but this node does not pass the update on and no other node has a copy: the other nodes need the stick too.';
}

/**
 * What `bundle-agent status` says when the process that wrote the status is gone: a line
 * written by a dead agent ("Loading images: 4 of 20", "Do not remove the USB stick") is no
 * longer true, so it is never shown as the current state.
 */
export function notRunningLine(
  s: NodeStatus | undefined,
  how: 'stopped' | 'unresponsive' = 'stopped',
): string {
  const head =
    how === 'stopped' ? 'The bundle agent is not running.' : 'The bundle agent is not responding.';
  if (!s || s.phase === 'Idle') return head;
  const words = onRemovableMedia(s.bundle?.media) ? (t: string) => t : fileWords;
  if (s.phase === 'Ready' || s.phase === 'Failed')
    return escapeControls(`${head} Its last report: ${sentence(s, new Date())}`);
  const what = s.bundle?.version ? `the update ${s.bundle.version}` : 'the update';
  return escapeControls(
    words(
      `${head} It stopped while loading ${what}, which did not finish. Ask the administrator to start it (systemctl start bundle-agent), then plug the USB stick in again.`,
    ),
  );
}
