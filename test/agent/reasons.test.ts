// tier: unit
// Words a technician reads: every reason the agent can fail with has a plain sentence that
// says what to do, with none of the words only an administrator knows.
import t from 'tap';
import { AGENT_REASONS, reasonOf } from '@offline-bundle/agent';
import {
  emptyStatus,
  FAILURE_SENTENCES,
  WAITING_SENTENCES,
  failureSentence,
  technicianLine,
  type NodeStatus,
} from '@offline-bundle/status';

// Kubernetes and runtime vocabulary, config keys, code-ish tokens and template leftovers.
const JARGON =
  /\b(CRI|CRI-O|crio|containerd|kubelet|kubectl|Kubernetes|registry|registries|manifest|digest|sha256|drop-in|reload|pinned|pins?|mirror|layout|OCI|tarball|yaml|config|stderr|ENOSPC|undefined|null|NaN)\b|\$\{|[{}<>`]/i;
const CAMEL_CASE = /\b[a-z]+[A-Z]\w*\b/;

for (const reason of AGENT_REASONS) {
  t.test(reason, async (t) => {
    const sentence = FAILURE_SENTENCES[reason];
    t.type(sentence, 'string', 'has a sentence');
    if (!sentence) return;
    t.notMatch(sentence, JARGON, 'no jargon');
    t.notMatch(sentence, CAMEL_CASE, 'no code names');
    t.match(sentence, /^[A-Z][^]*\.$/, 'a sentence: capital first, full stop last');
    t.ok(sentence.length <= 170, `short enough for one console line or two (${sentence.length})`);
    t.match(sentence, /\b(Ask|Plug|Copy|Wait|Check|Use)\b|stays on the node/, 'says what to do');
    const s: NodeStatus = {
      ...emptyStatus('n'),
      phase: 'Failed',
      conditions: [
        {
          type: 'Failed',
          status: 'True',
          reason,
          message: 'precise: for the admin',
          lastTransitionTime: '',
        },
      ],
    };
    t.equal(technicianLine(s), `Failed: ${sentence}`, 'the technician line is the sentence');
  });
}

for (const [reason, sentence] of Object.entries(WAITING_SENTENCES)) {
  t.test(`waiting: ${reason}`, async (t) => {
    t.notMatch(sentence, JARGON, 'no jargon');
    t.notMatch(sentence, CAMEL_CASE, 'no code names');
    t.ok(sentence.length <= 170, `short enough for one console line or two (${sentence.length})`);
    t.match(sentence, /Leave the USB stick in\.$/, 'says what to do meanwhile');
    const s: NodeStatus = {
      ...emptyStatus('n'),
      phase: 'Verifying',
      conditions: [
        {
          type: 'Ready',
          status: 'False',
          reason,
          message: 'precise: for the admin',
          lastTransitionTime: '',
        },
      ],
    };
    t.equal(technicianLine(s), sentence, 'the technician line while the load waits');
  });
}

t.test("the brief's own example", async (t) => {
  t.equal(
    FAILURE_SENTENCES.Interrupted,
    'The update was stopped before it finished. Plug the USB stick in again to restart it.',
  );
});

t.test("a reason this agent does not know (a newer one's) falls back to its message", async (t) => {
  const s: NodeStatus = {
    ...emptyStatus('n'),
    phase: 'Failed',
    conditions: [
      {
        type: 'Failed',
        status: 'True',
        reason: 'SomethingNew',
        message: 'what happened',
        lastTransitionTime: '',
      },
    ],
  };
  t.equal(technicianLine(s), 'Failed: what happened');
  t.equal(failureSentence('toString'), undefined, 'an inherited name is no reason');
});

t.test(
  'Ready while the agent restarts into a newer version: still Done, and says why it may briefly not answer',
  async (t) => {
    const s: NodeStatus = {
      ...emptyStatus('n'),
      phase: 'Ready',
      bundle: { file: 'f', media: 'file', version: '4.15.1' },
      conditions: [
        {
          type: 'AgentUpgraded',
          status: 'Unknown',
          reason: 'Restarting',
          message:
            'switching to bundle-agent 0.2.0 (localhost/offline-bundle/bundle-agent@sha256:…)',
          lastTransitionTime: '',
        },
      ],
    };
    const line = technicianLine(s);
    t.equal(
      line,
      'Done: update 4.15.1 is loaded on this node. You may remove the USB stick. The update program is restarting in its new version.',
    );
    t.notMatch(line, JARGON, 'no jargon');
  },
);

t.test(
  'a cut copy found on the stick is said beside any resting state, once (not again beside a Truncated failure)',
  async (t) => {
    const cut = {
      type: 'MediaIncomplete' as const,
      status: 'True' as const,
      reason: 'IncompleteFile',
      message: '/run/media/usb/4.16.1.bundle has no seek table at its end',
      lastTransitionTime: '',
    };
    const note =
      ' An update file found is incomplete and was not loaded: copy it again and wait until the copy has finished.';
    t.equal(
      technicianLine({ ...emptyStatus('n'), conditions: [cut] }),
      `Waiting for a USB stick with an update bundle.${note}`,
    );
    const ready: NodeStatus = {
      ...emptyStatus('n'),
      phase: 'Ready',
      bundle: { file: 'f', media: 'file', version: '4.15.1' },
      conditions: [cut],
    };
    t.equal(
      technicianLine(ready),
      `Done: update 4.15.1 is loaded on this node. You may remove the USB stick.${note}`,
    );
    const failed = (reason: string): NodeStatus => ({
      ...emptyStatus('n'),
      phase: 'Failed',
      conditions: [
        { type: 'Failed', status: 'True', reason, message: 'x', lastTransitionTime: '' },
        cut,
      ],
    });
    t.ok(technicianLine(failed('PullFailed')).endsWith(note), 'beside another failure');
    t.notOk(
      technicianLine(failed('Truncated')).endsWith(note),
      'a Truncated failure already says it',
    );
    t.notMatch(technicianLine(ready), JARGON, 'no jargon');
  },
);

t.test(
  'a library error code maps to its reason by own keys only: an inherited name is no reason',
  async (t) => {
    const coded = (code: unknown) => Object.assign(new Error('x'), { code });
    t.equal(reasonOf(coded('ENOSPC')), 'InsufficientSpace');
    t.equal(
      reasonOf(coded('LAYOUT_INVALID')),
      'StagingFailed',
      "the registry's code, typed over its union",
    );
    t.equal(reasonOf(coded('BLOB_DIGEST_MISMATCH')), 'Corrupt', 'format damage');
    for (const code of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 42, undefined]) {
      t.equal(reasonOf(coded(code)), 'Internal', `code ${String(code)}`);
    }
  },
);
