// The files `bundle-agent collect` reads as documents, to redact by key (collect-redact.ts),
// parsed only where parsing is linear: JSON by JSON.parse; YAML only when small, shallow and
// without collection keys. The yaml library is not linear on hostile text: its pretty errors
// rescan the text for each error (128 KiB of `"` took 28 s, 4 MiB hours), each error node
// costs ~25 µs a byte, and toJS stringifies every collection key of a `? ? ? …` chain (18 s
// for 128 KiB). Text not parsed is still redacted by the line and shape rules.
import { isScalar, parseDocument, stringify as stringifyYaml, visit, type Document } from 'yaml';
import { nestingTooDeep, valueTooDeep } from '@offline-bundle/host';
import { redactDocument, type RedactionTally } from './collect-redact.js';

/** Largest YAML text parsed as a document (a kubeconfig or agent config is a few KiB); a larger one gets the line rules only. */
export const MAX_COLLECT_YAML_PARSE_BYTES = 64 * 1024;

/** Whether a mapping in `doc` has a collection as a key (`? [a]`): toJS would stringify it, at a cost quadratic in its depth. */
function hasCollectionKey(doc: Document): boolean {
  let found = false;
  visit(doc, {
    Pair: (_key, pair) => {
      if (pair.key === null || isScalar(pair.key)) return undefined;
      found = true;
      return visit.BREAK;
    },
  });
  return found;
}

/** `text` as one YAML document's value, or undefined when it is too large, too deep or not one document. */
export function parseYamlBounded(text: string): { value: unknown } | undefined {
  if (
    Buffer.byteLength(text) > MAX_COLLECT_YAML_PARSE_BYTES ||
    nestingTooDeep(text, 'yaml') !== undefined
  )
    return undefined;
  const doc = parseDocument(text, { prettyErrors: false });
  if (doc.errors.length > 0 || hasCollectionKey(doc)) return undefined;
  const value: unknown = doc.toJS({ maxAliasCount: 100 });
  return valueTooDeep(value) ? undefined : { value };
}

function parseJson(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/**
 * A YAML or JSON document's text with its credentials redacted by key; text that does not parse
 * as one document (or is not parsed, see above) is returned as it is, for the archive's line
 * rules (key names in every format, and shapes) to redact.
 */
export function redactedDocument(text: string, as: 'yaml' | 'json', tally: RedactionTally): string {
  const doc = as === 'json' ? parseJson(text) : parseYamlBounded(text);
  if (!doc) return text;
  const clean = redactDocument(doc.value, tally);
  return as === 'json' ? `${JSON.stringify(clean, null, 2)}\n` : stringifyYaml(clean);
}
