// tier: unit
import t from 'tap';
import { escapeControls, firstLine } from '@offline-bundle/host';

t.test('escapeControls makes every control and bidi character visible', async (t) => {
  const hostile =
    'a\x1b[2J\x1b[32mDone\x07\r\n\t\x7f\x85\x9b\u202eevil\u2066\u200b\ufeff\u2028\u{e0041}\ud800z';
  const out = escapeControls(hostile);
  t.notMatch(out, /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/u, 'nothing unsafe left');
  t.match(out, /^[\x20-\x7e]*$/, 'printable ASCII only (the input was ASCII plus controls)');
  t.equal(escapeControls('\x1b[2J'), '\\x1b[2J', 'ESC becomes \\x1b');
  t.equal(escapeControls('\u202e'), '\\u202e', 'RIGHT-TO-LEFT OVERRIDE becomes \\u202e');
  t.equal(escapeControls('\u{e0041}'), '\\u{e0041}', 'tag characters beyond the BMP');
  t.equal(escapeControls(out), out, 'idempotent: applying it twice changes nothing');
  t.equal(
    escapeControls('4.14.39 é 日本 C:\\stick'),
    '4.14.39 é 日本 C:\\stick',
    'ordinary text, accents, CJK and backslashes unchanged',
  );
});

t.test('firstLine (every one-line error message) is escaped', async (t) => {
  t.equal(firstLine(new Error('\n  entry "\x1b[2Jx" bad\nsecond')), 'entry "\\x1b[2Jx" bad');
});
