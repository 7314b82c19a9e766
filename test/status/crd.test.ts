// tier: unit
// Contract tests for deploy/: no API server can run here, so the manifests are checked the way
// the API server would check them: every document parses; the CRD's openAPIV3Schema follows
// the structural-schema rules and compiles as JSON Schema (ajv); the objects toResource builds
// from the agent's statuses validate against it; the CEL rules (CRD and admission policy) are
// evaluated with a CEL implementation on the requests a node would make.
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { evaluate } from '@marcbachmann/cel-js';
import { admitPolicy } from '../helpers/kube-standin.js';
import {
  API_VERSION,
  BUNDLE_MODES,
  CONDITION_STATUSES,
  CONDITION_TYPES,
  GROUP,
  HISTORY_STATES,
  KIND,
  LIMITS,
  PHASES,
  PLURAL,
  REQUIRED,
  VERSION,
  emptyStatus,
  toResource,
  type NodeStatus,
} from '@offline-bundle/status';
import {
  compileSchema,
  crdSchema,
  DEPLOY,
  loadCrd,
  loadSequence,
  loadYamlDocs,
  type Doc,
} from './lib.js';

async function manifestFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...(await manifestFiles(p)));
    else if (/\.ya?ml$/.test(e.name)) out.push(p);
  }
  return out.sort();
}

t.test('contract: every manifest under deploy/ parses and names its kind', async (t) => {
  const files = await manifestFiles(DEPLOY);
  t.ok(
    files.some((f) => f.endsWith('crd.yaml')) && files.some((f) => f.endsWith('rbac.yaml')),
    'crd.yaml and rbac.yaml are there',
  );
  for (const f of files) {
    const docs = await loadYamlDocs(f);
    t.ok(docs.length > 0, `${path.relative(DEPLOY, f)}: at least one document`);
    for (const d of docs) {
      t.match(
        d,
        { apiVersion: String, kind: String, metadata: { name: String } },
        `${path.relative(DEPLOY, f)}: ${d.kind} ${d.metadata?.name}`,
      );
    }
  }
});

// Keywords a structural schema may use (apiextensions.k8s.io/v1 JSONSchemaProps, minus what
// CRDs forbid: $ref, definitions, patternProperties, dependencies, additionalItems, ...).
const ALLOWED = new Set([
  'type',
  'format',
  'title',
  'description',
  'default',
  'enum',
  'nullable',
  'example',
  'externalDocs',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'maxItems',
  'minItems',
  'uniqueItems',
  'maxLength',
  'minLength',
  'pattern',
  'maximum',
  'minimum',
  'exclusiveMaximum',
  'exclusiveMinimum',
  'multipleOf',
  'maxProperties',
  'minProperties',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-validations',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-int-or-string',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-map-type',
]);
const TYPES = new Set(['object', 'array', 'string', 'integer', 'number', 'boolean']);

/** Returns every violation of the structural-schema rules in `node` (at `where`). */
function structuralProblems(node: Doc, where: string, root = false): string[] {
  const p: string[] = [];
  for (const k of Object.keys(node))
    if (!ALLOWED.has(k)) p.push(`${where}: keyword ${k} is not allowed in a CRD schema`);
  if (node['x-kubernetes-preserve-unknown-fields'] === true)
    p.push(`${where}: x-kubernetes-preserve-unknown-fields (unmarked)`);
  if (node['x-kubernetes-int-or-string'] !== true && !TYPES.has(node.type))
    p.push(`${where}: no type`);
  if (node.uniqueItems === true) p.push(`${where}: uniqueItems: true is forbidden`);
  if (node.type === 'object') {
    if (node.properties && node.additionalProperties !== undefined)
      p.push(`${where}: properties and additionalProperties together`);
    if (!node.properties && node.additionalProperties === undefined && !root) {
      if (where !== '.metadata')
        p.push(`${where}: object without properties or additionalProperties`);
    }
    for (const r of node.required ?? [])
      if (!node.properties?.[r]) p.push(`${where}: required ${r} is not a property`);
    for (const [k, v] of Object.entries((node.properties ?? {}) as Record<string, Doc>)) {
      if (root && k === 'metadata') {
        // At the root, metadata may only be `type: object` (and name/generateName limits).
        const extra = Object.keys(v).filter((x) => x !== 'type' && x !== 'properties');
        if (v.type !== 'object' || extra.length)
          p.push('.metadata: only `type: object` is allowed at the root');
        continue;
      }
      if (root && (k === 'apiVersion' || k === 'kind')) {
        if (v.type !== 'string') p.push(`.${k}: must be a string`);
        continue; // checked by the API server itself
      }
      p.push(...structuralProblems(v, `${where}.${k}`));
    }
    if (typeof node.additionalProperties === 'object')
      p.push(...structuralProblems(node.additionalProperties, `${where}[*]`));
  } else if (node.properties) p.push(`${where}: properties on a non-object`);
  if (node.type === 'array') {
    if (!node.items || Array.isArray(node.items))
      p.push(`${where}: array without a single items schema`);
    else p.push(...structuralProblems(node.items, `${where}[]`));
    if (node['x-kubernetes-list-type'] === 'map') {
      for (const key of node['x-kubernetes-list-map-keys'] ?? []) {
        const ks = node.items?.properties?.[key];
        if (!ks || !['string', 'integer', 'boolean'].includes(ks.type))
          p.push(`${where}: list-map key ${key} must be a scalar property`);
        if (!(node.items?.required ?? []).includes(key))
          p.push(`${where}: list-map key ${key} must be required`);
      }
    }
  } else if (node.items) p.push(`${where}: items on a non-array`);
  if (
    node.type === 'string' &&
    node.enum === undefined &&
    node.maxLength === undefined &&
    node.format !== 'date-time'
  ) {
    p.push(`${where}: string without maxLength or enum`);
  }
  if (node.type === 'array' && node.maxItems === undefined)
    p.push(`${where}: list without maxItems`);
  for (const v of node.enum ?? [])
    if (typeof v !== (node.type === 'integer' ? 'number' : node.type))
      p.push(`${where}: enum value ${v} is not a ${node.type}`);
  return p;
}

t.test(
  'contract: the CRD defines a cluster-scoped NodeBundleStatus with status subresource and printer columns',
  async (t) => {
    const crd = await loadCrd();
    t.equal(crd.apiVersion, 'apiextensions.k8s.io/v1');
    t.equal(crd.kind, 'CustomResourceDefinition');
    t.equal(crd.metadata.name, `${PLURAL}.${GROUP}`);
    t.equal(crd.spec.group, GROUP);
    t.equal(crd.spec.scope, 'Cluster');
    t.equal(crd.spec.names.kind, KIND);
    t.equal(crd.spec.names.plural, PLURAL);
    t.equal(crd.spec.versions.length, 1);
    const v = crd.spec.versions[0];
    t.match(v, { name: VERSION, served: true, storage: true, subresources: { status: {} } });
    t.equal(API_VERSION, `${crd.spec.group}/${v.name}`);
    const cols = Object.fromEntries(v.additionalPrinterColumns.map((c: Doc) => [c.name, c]));
    t.match(cols, {
      Phase: { jsonPath: '.status.phase', type: 'string' },
      Version: { jsonPath: '.status.bundle.version', type: 'string' },
      Progress: { jsonPath: '.status.progress.percent', type: 'string' },
      Age: { jsonPath: '.metadata.creationTimestamp', type: 'date' },
    });
    // Every column points at a field the schema defines, with the column's type.
    const schema = crdSchema(crd);
    for (const c of v.additionalPrinterColumns as Doc[]) {
      if (c.jsonPath.startsWith('.metadata.')) continue;
      let n: Doc | undefined = schema;
      for (const part of c.jsonPath.slice(1).split('.')) n = n?.properties?.[part];
      t.ok(n, `column ${c.name}: ${c.jsonPath} is in the schema`);
      t.equal(n?.type, c.type === 'date' ? 'string' : c.type, `column ${c.name}: type`);
    }
  },
);

t.test('contract: the CRD schema is structural', async (t) => {
  const schema = crdSchema(await loadCrd());
  t.same(structuralProblems(schema, '', true), [], 'no violation');
  // The walker does catch violations (so the empty list above means something).
  const bad = structuredClone(schema);
  delete bad.properties.status.properties.phase.type;
  bad.properties.status.properties.extra = { type: 'object' };
  bad.properties.status.properties.free = {
    type: 'object',
    'x-kubernetes-preserve-unknown-fields': true,
  };
  bad.properties.status.properties.history.items.$ref = '#/x';
  delete bad.properties.status.properties.message.maxLength;
  const found = structuralProblems(bad, '', true).join('\n');
  t.match(found, /\.status\.phase: no type/);
  t.match(found, /\.status\.extra: object without properties/);
  t.match(found, /\.status\.free: x-kubernetes-preserve-unknown-fields/);
  t.match(found, /keyword \$ref/);
  t.match(found, /\.status\.message: string without maxLength/);
});

/** Every schema node under `node` that has an enum, by path. */
function enums(node: Doc, where: string): string[] {
  const out = node.enum ? [where] : [];
  for (const [k, v] of Object.entries((node.properties ?? {}) as Record<string, Doc>))
    out.push(...enums(v, `${where}.${k}`));
  if (node.items) out.push(...enums(node.items, `${where}[]`));
  return out;
}

const KNOWN = /Known values: ([^;]+); other values may appear from newer agents\./;

t.test(
  "contract: agent-written fields have no enum; their descriptions list the model's values",
  async (t) => {
    const st = crdSchema(await loadCrd()).properties.status;
    // An enum would make an older CRD refuse (422) the whole status of a newer agent that writes a new value.
    t.same(enums(st, '.status'), [], 'no enum anywhere in the status');
    const fields: [string, Doc, readonly string[], number][] = [
      ['phase', st.properties.phase, PHASES, LIMITS.phase],
      [
        'conditions[].type',
        st.properties.conditions.items.properties.type,
        CONDITION_TYPES,
        LIMITS.conditionType,
      ],
      [
        'conditions[].status',
        st.properties.conditions.items.properties.status,
        CONDITION_STATUSES,
        LIMITS.conditionStatus,
      ],
      [
        'history[].state',
        st.properties.history.items.properties.state,
        HISTORY_STATES,
        LIMITS.historyState,
      ],
      ['bundle.mode', st.properties.bundle.properties.mode, BUNDLE_MODES, LIMITS.mode],
    ];
    for (const [name, schema, values, max] of fields) {
      const listed = KNOWN.exec(String(schema.description).replace(/\s+/g, ' '))?.[1]?.split(', ');
      t.same(listed, [...values], `${name}: the description lists the code's values`);
      t.equal(schema.type, 'string', `${name}: a string`);
      t.equal(schema.maxLength, max, `${name}: bounded (LIMITS)`);
      t.ok(
        values.every((v) => v.length <= max),
        `${name}: every known value fits`,
      );
    }
    t.match(st.properties.conditions, {
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
      maxItems: LIMITS.conditions,
    });
    t.equal(st.properties.history.maxItems, LIMITS.history);
    t.equal(st.properties.node.maxLength, LIMITS.nodeName);
    t.equal(st.properties.message.maxLength, LIMITS.message);
    t.equal(st.properties.conditions.items.properties.message.maxLength, LIMITS.conditionMessage);
    t.equal(st.properties.conditions.items.properties.reason.maxLength, LIMITS.reason);
    const required: Record<string, readonly string[]> = {
      status: st.required,
      'status.bundle': st.properties.bundle.required,
      'status.conditions[]': st.properties.conditions.items.required,
      'status.progress': st.properties.progress.required,
      'status.history[]': st.properties.history.items.required,
      'status.serving': st.properties.serving.required,
    };
    t.same(
      REQUIRED,
      required,
      "REQUIRED (what the reporter may not leave out) is the CRD's required lists",
    );
    const b = st.properties.bundle.properties;
    t.same(
      [
        b.file.maxLength,
        b.name.maxLength,
        b.version.maxLength,
        b.arch.maxLength,
        b.media.maxLength,
      ],
      [LIMITS.file, LIMITS.name, LIMITS.version, LIMITS.arch, LIMITS.media],
    );
  },
);

t.test('contract: the schema compiles as JSON Schema (ajv, strict)', async (t) => {
  const schema = crdSchema(await loadCrd());
  t.doesNotThrow(() => compileSchema(schema));
  t.doesNotThrow(() => compileSchema(schema, { closed: true }));
});

function validate(schema: Doc, obj: unknown): string[] {
  const v = compileSchema(schema, { closed: true });
  return v(obj) ? [] : (v.errors ?? []).map((e) => `${e.instancePath} ${e.message}`);
}

function celRule(obj: Doc, rule: string): boolean {
  return evaluate(rule, { self: obj }) as boolean;
}

t.test(
  'contract: every status of a full load, wrapped by toResource, validates against the CRD',
  async (t) => {
    const crd = await loadCrd();
    const schema = crdSchema(crd);
    const rules = (schema['x-kubernetes-validations'] as Doc[]).map((r) => r.rule as string);
    const v = compileSchema(schema, { closed: true });
    const runs: [string, NodeStatus[]][] = [
      ['staged load to Ready', loadSequence()],
      ['served from the media', loadSequence({ mode: 'media' })],
      ['bad signature', loadSequence({ fail: 'Verifying' })],
      ['pull failure', loadSequence({ fail: 'Preloading' })],
    ];
    for (const [name, seq] of runs) {
      const phases = [...new Set(seq.map((s) => s.phase))];
      let bad = 0;
      for (const [i, s] of seq.entries()) {
        const obj = toResource(s, 'worker-1', i % 2 ? { generation: 3 } : {});
        if (!v(obj)) {
          bad++;
          t.fail(`${name} #${i} (${s.phase}): ${JSON.stringify(v.errors)}`);
        }
        for (const r of rules) if (!celRule(obj, r)) t.fail(`${name} #${i}: CEL rule ${r}`);
      }
      t.equal(bad, 0, `${name}: ${seq.length} statuses through ${phases.join(' → ')} validate`);
    }
    t.same(
      [...new Set(runs[0]![1].map((s) => s.phase))],
      ['Idle', 'Verifying', 'Staging', 'Serving', 'Preloading', 'Pinning', 'Ready'],
    );
    t.equal(runs[2]![1].at(-1)!.phase, 'Failed');
    const ready = toResource(runs[0]![1].at(-1)!, 'worker-1', { generation: 2 });
    t.match(ready, {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name: 'worker-1' },
      status: {
        node: 'worker-1',
        phase: 'Ready',
        observedGeneration: 2,
        progress: { percent: '100%', rate: 120000001 },
      },
    });
    t.ok(
      ready.status.conditions.every((c) => c.observedGeneration === 2),
      'conditions carry observedGeneration',
    );
    t.equal(
      toResource(emptyStatus('worker-1'), 'worker-1').status.progress.percent,
      undefined,
      'Idle: no percent',
    );
  },
);

t.test('contract: statuses the API server must refuse fail validation', async (t) => {
  const schema = crdSchema(await loadCrd());
  const good = toResource(loadSequence().at(-1)!, 'worker-1');
  t.same(validate(schema, good), []);
  const cases: [string, (o: Doc) => void, RegExp][] = [
    [
      'overlong phase',
      (o) => (o.status.phase = 'P'.repeat(LIMITS.phase + 1)),
      /phase must NOT have more than/,
    ],
    [
      'empty condition type',
      (o) => (o.status.conditions[0].type = ''),
      /type must NOT have fewer than 1/,
    ],
    [
      'overlong condition status',
      (o) => (o.status.conditions[0].status = 'Y'.repeat(LIMITS.conditionStatus + 1)),
      /status must NOT have more than/,
    ],
    [
      'reason with spaces',
      (o) => (o.status.conditions[0].reason = 'not camel'),
      /reason must match pattern/,
    ],
    ['negative bytes', (o) => (o.status.progress.bytesDone = -1), /bytesDone must be >= 0/],
    [
      'fractional images',
      (o) => (o.status.progress.imagesDone = 1.5),
      /imagesDone must be integer/,
    ],
    [
      'overlong message',
      (o) => (o.status.message = 'x'.repeat(LIMITS.message + 1)),
      /message must NOT have more than/,
    ],
    ['bad digest', (o) => (o.status.bundle.digest = 'md5:abc'), /digest must match pattern/],
    [
      'overlong history state',
      (o) => (o.status.history[0].state = 's'.repeat(LIMITS.historyState + 1)),
      /state must NOT have more than/,
    ],
    [
      'bad time',
      (o) => (o.status.updatedAt = 'yesterday'),
      /updatedAt must match format "date-time"/,
    ],
    ['missing phase', (o) => delete o.status.phase, /must have required property 'phase'/],
    ['unknown field', (o) => (o.status.colour = 'blue'), /must NOT have additional properties/],
    [
      'too many history entries',
      (o) =>
        (o.status.history = Array.from({ length: LIMITS.history + 1 }, () => o.status.history[0])),
      /history must NOT have more than/,
    ],
  ];
  for (const [name, mutate, re] of cases) {
    const o = structuredClone(good) as Doc;
    mutate(o);
    t.match(validate(schema, o).join('\n'), re, name);
  }
  const rule = (schema['x-kubernetes-validations'] as Doc[])[0]!.rule as string;
  const other = structuredClone(good) as Doc;
  other.status.node = 'worker-2';
  t.equal(celRule(other, rule), false, 'CEL: status.node must equal metadata.name');
  t.equal(
    celRule({ metadata: { name: 'worker-1' } }, rule),
    true,
    'CEL: an object without status (created by the metadata-only apply) passes',
  );
});

t.test(
  "contract: a newer agent's new values validate (phase, condition type and status, history state, mode)",
  async (t) => {
    const schema = crdSchema(await loadCrd());
    const good = toResource(loadSequence().at(-1)!, 'worker-1');
    const newer = structuredClone(good) as Doc;
    newer.status.phase = 'Unpinning';
    newer.status.conditions.push({
      type: 'Attested',
      status: 'Degraded',
      reason: 'NewCheck',
      message: 'a check this CRD predates',
      lastTransitionTime: '2026-11-21T10:06:00.000Z',
    });
    newer.status.history[0].state = 'superseded';
    newer.status.bundle.mode = 'network';
    t.same(validate(schema, newer), [], 'valid: the API server stores it');
  },
);

t.test('contract: toResource bounds whatever the agent puts in a status', async (t) => {
  const schema = crdSchema(await loadCrd());
  const s = loadSequence({ fail: 'Preloading' }).at(-1)!;
  s.message = 'm'.repeat(5000);
  s.conditions[0]!.message = '€'.repeat(LIMITS.conditionMessage + 10);
  s.conditions[1]!.reason = '42 not: a reason!';
  s.conditions.push({ ...s.conditions[0]!, status: 'False' }); // duplicate type: the last one wins
  s.bundle!.file = '/x'.repeat(3000);
  s.bundle!.digest = 'not-a-digest';
  s.progress.rate = Number.NaN;
  s.progress.etaSeconds = -5;
  s.history = Array.from({ length: 40 }, (_, i) => ({
    version: `4.15.${i}`,
    state: 'failed' as const,
    at: '2026-11-21T10:00:00.000Z',
  }));
  const o = toResource(s, 'worker-1');
  t.same(validate(schema, o), [], 'still valid');
  t.equal(Array.from(o.status.message).length, LIMITS.message);
  t.equal(o.status.conditions[1]!.reason, 'not:areason', 'reason made valid');
  t.equal(o.status.conditions.filter((c) => c.type === s.conditions[0]!.type).length, 1);
  t.equal(o.status.conditions.find((c) => c.type === s.conditions[0]!.type)!.status, 'False');
  t.equal(o.status.bundle!.digest, undefined, 'an invalid digest is left out');
  t.equal(o.status.progress.rate, undefined);
  t.equal(o.status.progress.etaSeconds, 0);
  t.equal(o.status.history.length, LIMITS.history);
  t.equal(o.status.history.at(-1)!.version, '4.15.39', 'the newest entries are kept');
  t.throws(() => toResource(s, 'Worker_1'), TypeError, 'an invalid node name is refused');
});

// ----------------------------------------------------------------------------------------
// rbac.yaml

async function rbacDocs(): Promise<Doc[]> {
  return loadYamlDocs(path.join(DEPLOY, 'rbac.yaml'));
}

t.test(
  'contract: RBAC lets nodes create, patch and read NodeBundleStatus, nothing more',
  async (t) => {
    const docs = await rbacDocs();
    const byKind = (k: string) => docs.filter((d) => d.kind === k);
    const writer = byKind('ClusterRole').find(
      (d) => d.metadata.name === 'offline-bundle:node-status-writer',
    )!;
    t.ok(writer, 'writer ClusterRole');
    const verbs = (res: string) =>
      new Set(
        writer.rules
          .filter((r: Doc) => r.apiGroups.includes(GROUP) && r.resources.includes(res))
          .flatMap((r: Doc) => r.verbs),
      );
    t.same(
      [...verbs(PLURAL)].sort(),
      ['create', 'get', 'patch'],
      'main resource: get, create (apply of a missing object), patch',
    );
    t.same(
      [...verbs(`${PLURAL}/status`)].sort(),
      ['get', 'patch'],
      'status subresource: get, patch',
    );
    for (const r of writer.rules as Doc[])
      t.notOk(
        r.resourceNames,
        'no resourceNames (create cannot use them): the admission policy pins the name',
      );
    const binding = byKind('ClusterRoleBinding').find(
      (d) => d.roleRef.name === writer.metadata.name,
    )!;
    t.match(binding, { roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole' } });
    t.same(binding.subjects.map((s: Doc) => `${s.kind}:${s.name}`).sort(), [
      'Group:system:nodes',
      'Group:system:serviceaccounts:offline-bundle',
    ]);
    const vap = byKind('ValidatingAdmissionPolicy')[0]!;
    const vapb = byKind('ValidatingAdmissionPolicyBinding')[0]!;
    t.equal(vap.apiVersion, 'admissionregistration.k8s.io/v1');
    t.equal(vapb.spec.policyName, vap.metadata.name);
    t.same(vapb.spec.validationActions, ['Deny']);
    t.equal(vap.spec.failurePolicy, 'Fail');
    const rule = vap.spec.matchConstraints.resourceRules[0];
    t.same(rule.apiGroups, [GROUP]);
    t.same([...rule.resources].sort(), [PLURAL, `${PLURAL}/status`]);
    t.ok(
      ['CREATE', 'UPDATE'].every((op) => rule.operations.includes(op)),
      'CREATE and UPDATE (what apply turns into)',
    );
  },
);

/** Evaluates the policy as the API server does (the RBAC stand-in's evaluator). */
function admit(vap: Doc, request: Doc): { matched: boolean; allowed: boolean; message?: string } {
  const matched = (vap.spec.matchConditions as Doc[]).every(
    (m) => evaluate(m.expression, { request }) === true,
  );
  const denied = admitPolicy(vap.spec, request);
  return { matched, allowed: !denied, ...(denied ? { message: denied.message } : {}) };
}

t.test(
  'contract: the admission policy lets a node write only the object named after itself',
  async (t) => {
    const vap = (await rbacDocs()).find((d) => d.kind === 'ValidatingAdmissionPolicy')!;
    const req = (
      username: string,
      groups: readonly string[],
      name: string,
      subResource = 'status',
      operation = 'UPDATE',
    ): Doc => ({
      name,
      operation,
      subResource,
      resource: { group: GROUP, version: VERSION, resource: PLURAL },
      userInfo: { username, groups: [...groups, 'system:authenticated'] },
    });
    const node = (n: string) => [`system:node:${n}`, ['system:nodes']] as const;
    const sa = (n: string) =>
      [
        `system:serviceaccount:offline-bundle:${n}`,
        ['system:serviceaccounts', 'system:serviceaccounts:offline-bundle'],
      ] as const;

    t.match(
      admit(vap, req(...node('worker-1'), 'worker-1')),
      { matched: true, allowed: true },
      'node identity, own object, status',
    );
    t.match(
      admit(vap, req(...node('worker-1'), 'worker-1', '', 'CREATE')),
      { matched: true, allowed: true },
      'node identity, own object, create',
    );
    const denied = admit(vap, req(...node('worker-1'), 'worker-2'));
    t.match(denied, { matched: true, allowed: false }, "node identity, another node's object");
    t.match(
      denied.message,
      /system:node:worker-1 may only write the NodeBundleStatus named after its own node, not worker-2/,
    );
    t.match(
      admit(vap, req(...node('worker-1'), 'worker-2', '', 'CREATE')),
      { allowed: false },
      "cannot create another node's object",
    );
    t.match(
      admit(vap, req(...sa('bundle-agent-worker-2'), 'worker-2')),
      { matched: true, allowed: true },
      'per-node ServiceAccount, own object',
    );
    t.match(
      admit(vap, req(...sa('bundle-agent-worker-2'), 'worker-1')),
      { allowed: false },
      'per-node ServiceAccount, other object',
    );
    t.match(
      admit(vap, req(...sa('default'), 'worker-1')),
      { matched: true, allowed: false },
      'another ServiceAccount of the namespace (bound by RBAC) is held too',
    );
    t.match(
      admit(vap, req('kube:admin', ['system:cluster-admins'], 'worker-1')),
      { matched: false, allowed: true },
      'admins are not matched',
    );
  },
);
