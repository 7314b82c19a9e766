// What the API server checks when an object of a CRD is created: the shipped CRD's
// openAPIV3Schema (ajv) and its CEL rules (x-kubernetes-validations, with cel-js), at the root
// and on the properties below it. Transition rules (those naming oldSelf) apply only to updates
// and are skipped here. A refusal is the API server's 422 Invalid Status.
import { evaluate } from '@marcbachmann/cel-js';
import { compileSchema, loadYamlDocs, type Doc } from '../status/lib.js';

export type CreateCheck = (obj: Doc) => Doc | undefined;

/** Every CEL rule of `schema` and below, with the path of the value it is about ('' = root). */
function celRules(
  schema: Doc,
  at: string[] = [],
): { at: string[]; rule: string; message: string }[] {
  const out = ((schema['x-kubernetes-validations'] ?? []) as Doc[])
    .filter((v) => !/\boldSelf\b/.test(v.rule))
    .map((v) => ({
      at,
      rule: v.rule as string,
      message: (v.message as string | undefined) ?? `failed rule: ${v.rule}`,
    }));
  for (const [k, v] of Object.entries((schema.properties ?? {}) as Record<string, Doc>))
    out.push(...celRules(v, [...at, k]));
  return out;
}

function invalid(
  kind: string,
  group: string,
  name: string,
  causes: { field: string; message: string }[],
): Doc {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    reason: 'Invalid',
    code: 422,
    message: `${kind}.${group} "${name}" is invalid: ${causes.map((c) => `${c.field}: ${c.message}`).join(', ')}`,
    details: {
      name,
      group,
      kind,
      causes: causes.map((c) => ({ reason: 'FieldValueInvalid', ...c })),
    },
  };
}

/** Checks for creating objects of each CRD in `file`, by plural (e.g. "bundleapprovals"). */
export async function crdCreateChecks(file: string): Promise<Map<string, CreateCheck>> {
  const out = new Map<string, CreateCheck>();
  for (const crd of await loadYamlDocs(file)) {
    if (crd.kind !== 'CustomResourceDefinition') continue;
    const schema = crd.spec.versions[0].schema.openAPIV3Schema as Doc;
    const validate = compileSchema(schema);
    const rules = celRules(schema);
    const { kind } = crd.spec.names;
    const group = crd.spec.group as string;
    out.set(crd.spec.names.plural, (obj) => {
      const name = String(obj?.metadata?.name ?? '');
      if (!validate(obj)) {
        return invalid(
          kind,
          group,
          name,
          (validate.errors ?? []).map((e) => ({
            field: e.instancePath.split('/').slice(1).join('.') || '<root>',
            message: String(e.message),
          })),
        );
      }
      for (const r of rules) {
        let self: unknown = obj;
        for (const p of r.at) self = (self as Doc | undefined)?.[p];
        if (self === undefined) continue;
        let ok: unknown;
        try {
          ok = evaluate(r.rule, { self });
        } catch {
          ok = false;
        }
        if (ok !== true)
          return invalid(kind, group, name, [
            { field: r.at.join('.') || '<root>', message: `Invalid value: "object": ${r.message}` },
          ]);
      }
      return undefined;
    });
  }
  return out;
}
