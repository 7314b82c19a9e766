// What a technician reads when a load fails: one plain sentence per failure reason, naming
// what to do, with no word only an administrator knows. The condition's message keeps the
// precise cause for the administrator (status --json, the cluster resource, the journal).

/** Why the agent refused or stopped a load: the Failed condition's reason (CamelCase). */
export const FAILURE_REASONS = [
  'NoTrust',
  'BadSignature',
  'UntrustedKey',
  'DigestMismatch',
  'Corrupt',
  'Truncated',
  'WrongArch',
  'Downgrade',
  'NotAnUpgradeSource',
  'UnknownRunningVersion',
  'ClusterForbidden',
  'ClusterUnreachable',
  'InsufficientSpace',
  'StagingFailed',
  'RegistryFailed',
  'RuntimeUnavailable',
  'PullFailed',
  'PullStalled',
  'NoSpaceInImageStore',
  'PinFailed',
  'ReloadFailed',
  'MediaRemoved',
  'InvalidConfig',
  'UnsupportedVersion',
  'ForeignFile',
  'WriteFailed',
  'Interrupted',
  'Busy',
  'Internal',
  'MirrorNotUsed',
  'RestoreFailed',
  'NotRecorded',
  'InUse',
  'StatusDamaged',
  'PartsIncomplete',
  'PartsMixed',
  'PartCutShort',
  'PartsOtherBundle',
  'BaseMissing',
  'BaseCorrupt',
  'NoPeerHasBundle',
  'PeersSuspect',
  'ApprovalRevoked',
  'RuntimeIgnoresMirror',
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

/** Failure reason → the technician's sentence (typed: a reason without a sentence does not compile). */
export const FAILURE_SENTENCES: Readonly<Record<FailureReason, string>> = {
  NoTrust:
    'This node has no key to check updates with. Ask the administrator to set up the node, then plug the USB stick in again.',
  BadSignature:
    'The update on the USB stick is not signed correctly and was refused. Ask for a new copy of the update.',
  UntrustedKey:
    'The update on the USB stick was signed by someone this node does not trust and was refused. Ask for the right update.',
  DigestMismatch:
    'The file on the USB stick is not the expected update and was refused. Ask for a new copy of the update.',
  Corrupt:
    'The update file on the USB stick is damaged. Copy it to the stick again (or use another stick) and plug it in again.',
  Truncated:
    'The update file on the USB stick is incomplete. Copy it to the stick again, wait until the copy has finished, and plug it in again.',
  WrongArch:
    'This update is for another type of computer than this node. Ask for the update made for this node.',
  Downgrade:
    'This update is older than what the node runs and was refused. Ask for a newer update.',
  NotAnUpgradeSource:
    'This update cannot be installed directly over what the node runs. Ask the administrator which update must come first.',
  UnknownRunningVersion:
    'The node could not find out which version it runs, so it did not load the update. Ask the administrator to check the node.',
  ClusterForbidden:
    'The node may not ask the cluster which version it runs, so the update was not loaded. Ask the administrator to allow it, then plug the USB stick in again.',
  ClusterUnreachable:
    'The node could not reach the cluster to learn which version it runs, so the update was not loaded. Plug the USB stick in again once the cluster is up.',
  InsufficientSpace:
    'There is not enough free disk space on this node for the update. Ask the administrator to free space, then plug the USB stick in again.',
  StagingFailed:
    "Copying the update to this node's disk failed. Plug the USB stick in again; if it fails again, ask the administrator.",
  RegistryFailed:
    'The node could not start serving the update to itself. Plug the USB stick in again; if it fails again, ask the administrator.',
  RuntimeUnavailable:
    'The program that runs applications on this node is not answering. Ask the administrator to check it, then plug the USB stick in again.',
  PullFailed:
    "Loading the update's images into this node failed. Plug the USB stick in again; if it fails again, ask the administrator.",
  PullStalled:
    "Loading the update's images into this node stopped moving and was given up after several tries. Plug the USB stick in again; if it stops again, ask the administrator.",
  NoSpaceInImageStore:
    'The node ran out of disk space while loading the update. Ask the administrator to free space, then plug the USB stick in again.',
  PinFailed:
    'The update was loaded but the node could not protect it from being cleaned away. Ask the administrator to check the node, then plug the USB stick in again.',
  ReloadFailed:
    'The program that runs applications on this node did not take the new settings. Ask the administrator to check it, then plug the USB stick in again.',
  MediaRemoved:
    'The USB stick was removed, or stopped working, before the update was read. Plug it in again and leave it in until the node says you may remove it.',
  InvalidConfig:
    'The settings of the update program on this node are wrong. Ask the administrator to fix them.',
  UnsupportedVersion:
    "This update was made for a newer update program than this node has. Ask the administrator to update the node's update program first.",
  ForeignFile:
    'Settings made by someone else on this node are in the way of the update. Ask the administrator to check the node, then plug the USB stick in again.',
  WriteFailed:
    "The node could not save the settings the update needs. Ask the administrator to check the node's disk, then plug the USB stick in again.",
  StatusDamaged:
    "The update program's record of this node is damaged. Ask the administrator to restart the update program.",
  Interrupted:
    'The update was stopped before it finished. Plug the USB stick in again to restart it.',
  Busy: 'The node is already loading another update. Wait until it says it is done, then plug the USB stick in again.',
  Internal:
    "The update program hit an unexpected error. Plug the USB stick in again; if it fails again, ask the administrator to read the node's log.",
  MirrorNotUsed:
    "The node did not take the update's images from the USB stick. Ask the administrator to check the node, then plug the USB stick in again.",
  RuntimeIgnoresMirror:
    'The container runtime of this node is not set up to load updates, so nothing was copied. Ask the administrator to set it up, then plug the USB stick in again.',
  RestoreFailed:
    'Parts of the update went missing on this node and could not be put back. Plug the USB stick in again.',
  NotRecorded: 'That update is not known on this node. Check the version number and try again.',
  InUse: 'That update is the one the node runs now, so it stays on the node.',
  PartsIncomplete:
    'A part of the update is missing from the USB stick, or does not belong to it. Copy all its parts onto the stick again and plug it in again.',
  PartsMixed:
    'A part on this USB stick is from another update than the parts copied before, which were dropped. Plug in the sticks of one update only, one after another.',
  PartCutShort:
    'A part of the update on this USB stick is shorter than the others: its copy was cut short. Copy it to the stick again and plug the sticks in again.',
  PartsOtherBundle:
    'This USB stick holds parts of another update than the one being collected; the parts copied before are kept. Plug in the stick with the parts still missing.',
  NoPeerHasBundle:
    'No other node could send this update. Wait until a node that holds it is up, or plug in the USB stick with the update.',
  PeersSuspect:
    'The other nodes sent parts of the update that did not match it. Ask the administrator to check those nodes, or plug in the USB stick with the update.',
  ApprovalRevoked:
    'The update was withdrawn while it was being copied, so the copy stopped and was removed. Ask the administrator whether it is still wanted.',
  BaseMissing:
    'This update is a small one that builds on an earlier update this node does not have. Plug in the full update instead.',
  BaseCorrupt:
    'This update is a small one that builds on an earlier update, whose copy on this node is damaged. Plug in the full update instead.',
};

/**
 * MediaDetected reasons while the parts of a split update are collected from sticks plugged one
 * after another: the condition's message is the technician's line, as it names the parts
 * ("Copied parts 1–2 of 5. You may remove this stick. Insert the stick with part 3 of 5.").
 */
export const PART_COLLECTING_REASONS: ReadonlySet<string> = new Set([
  'PartsCopying',
  'PartsWaiting',
]);

/**
 * A load that waits for the cluster before it can check the update (the Ready condition's
 * reason while the phase is Verifying) → the technician's sentence; the agent keeps trying.
 */
export const WAITING_SENTENCES: Readonly<Record<string, string>> = {
  WaitingForCluster:
    'Waiting for the cluster to say which version it runs before loading the update; the node keeps trying. Leave the USB stick in.',
  ClusterForbidden:
    'Waiting: the node may not ask the cluster which version it runs. Ask the administrator to allow it; the node keeps trying. Leave the USB stick in.',
};

/** The sentence for a reason, or undefined for a reason this list does not know (a newer agent's). */
export function failureSentence(reason: string | undefined): string | undefined {
  return reason && Object.hasOwn(FAILURE_SENTENCES, reason)
    ? FAILURE_SENTENCES[reason as FailureReason]
    : undefined;
}

/** How the media watcher names a drop directory in the status's bundle.media (a stick is named by its label or mount point). */
export const DROP_DIRECTORY_MEDIA = 'drop directory ';

/**
 * How the agent names its part spool as a bundle's media: the parts were copied to the node's
 * disk, so a load from there needs no stick (summary.ts says "You may remove the USB stick").
 */
export const SPOOLED_MEDIA = 'parts copied from USB sticks';

/** How the agent names other nodes as a bundle's media: fetched from them (issue #22), no stick on this node. */
export const PEER_MEDIA = 'peers';

/** `bundle.media` of a load tried again from the verified copy a failed load kept on the node's disk (no stick). */
export const KEPT_COPY_MEDIA = 'copy kept on this node';

/** Whether a bundle is read from the agent's part spool on the node's disk, not from a stick. */
export const fromSpool = (media: string | undefined): boolean =>
  media?.startsWith(SPOOLED_MEDIA) === true;

/** Whether the bundle came on removable media: not a file given to `bundle-agent load` nor one left in a drop directory. */
export function onRemovableMedia(media: string | undefined): boolean {
  return !(media === 'file' || media?.startsWith(DROP_DIRECTORY_MEDIA));
}

// The failure sentences speak of a USB stick; for a file given by hand or dropped in a
// directory, the same advice in words about the file (most specific phrases first). The
// progress lines ("You may remove the USB stick") are left as they are: such a file is often
// on a stick too.
const FILE_WORDS: readonly [RegExp, string][] = [
  [
    /Copy it to the stick again \(or use another stick\) and plug it in again\./g,
    'Copy it again and load it again.',
  ],
  [
    /Copy it to the stick again, wait until the copy has finished, and plug it in again\./g,
    'Copy it again, wait until the copy has finished, and load it again.',
  ],
  [
    /The USB stick was removed, or stopped working, before the update was read\. Plug it in again and leave it in until the node says you may remove it\./g,
    'The update file was removed, or its disk stopped working, before the update was read. Put it back and load it again.',
  ],
  [
    /A part of the update is missing from the USB stick, or does not belong to it\. Copy all its parts onto the stick again and plug it in again\./g,
    'A part of the update is missing, or does not belong to it. Copy all its parts again, into one directory, and load it again.',
  ],
  [
    /A part on this USB stick is from another update than the parts copied before, which were dropped\. Plug in the sticks of one update only, one after another\./g,
    'A part of the update is from another update than the parts copied before, which were dropped. Copy the parts of one update only, into one directory, and load it again.',
  ],
  [
    /A part of the update on this USB stick is shorter than the others: its copy was cut short\. Copy it to the stick again and plug the sticks in again\./g,
    'A part of the update is shorter than the others: its copy was cut short. Copy it again and load it again.',
  ],
  [
    /This USB stick holds parts of another update than the one being collected; the parts copied before are kept\. Plug in the stick with the parts still missing\./g,
    'These parts are of another update than the one being collected; the parts copied before are kept. Copy the parts still missing of that update, into one directory, and load it again.',
  ],
  [/plug the USB stick in again/g, 'load the update file again'],
  [/Plug the USB stick in again/g, 'Load the update file again'],
  [/The update (file )?on the USB stick/g, 'The update file'],
  [/The file on the USB stick/g, 'The file'],
  [/the USB stick/g, 'the update file'],
];

/** A failure sentence (or a note) as said for a bundle that did not come on a stick (see onRemovableMedia). */
export function fileWords(text: string): string {
  return FILE_WORDS.reduce((t, [re, by]) => t.replace(re, by), text);
}
