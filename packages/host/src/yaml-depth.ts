/**
 * The nesting of YAML text, counted in one linear pass without parsing it: block collections
 * by their indentation (a `- ` or `key:` deeper than the one above opens a level, compact
 * `- - -` one per indicator), flow collections by their brackets, block scalars and quoted
 * scalars skipped as text. It counts what the yaml library would build: the bound holds for
 * anything that parses, and for what does not (the library builds those too before it says so).
 */
const SEQ = 0;
const MAP = 1;

const isBlank = (c: string | undefined) => c === ' ' || c === '\t' || c === '\r';
const isFlowIndicator = (c: string | undefined) => c !== undefined && ',[]{}'.includes(c);
/** What the yaml library's lexer takes into a tag (a `"` ends one, a `'` does not). */
const TAG_CHARS = /[0-9A-Za-z\-#;/?:@&=+$_.!~*'()]/;

class YamlDepthScan {
  /** The line where the nesting went past the bound, once it did. */
  over: number | undefined;
  private readonly cols: number[] = [];
  private readonly kinds: number[] = [];
  /** The open flow collections' brackets, and whether each (a sequence) holds an open `key: value` pair. */
  private readonly flowOpen: string[] = [];
  private readonly flowPair: boolean[] = [];
  private pairs = 0;
  private quote = '';
  /**
   * A quote inside a plain scalar is text (`a'b`, `a"b`): while one runs in a flow collection,
   * and, in block context, the indentation its next lines are deeper than when they go on with it.
   */
  private flowPlain = false;
  private plainOwner: number | undefined;
  /** While a block scalar runs: the indentation its text lines are deeper than. */
  private blockParent: number | undefined;
  private line = 0;
  private lineStart = 0;

  constructor(
    private readonly t: string,
    private readonly max: number,
  ) {}

  run(): number | undefined {
    for (let s = 0; s <= this.t.length && this.over === undefined;) {
      let e = this.t.indexOf('\n', s);
      if (e < 0) e = this.t.length;
      this.line++;
      this.lineStart = s;
      this.scanLine(s, e);
      s = e + 1;
    }
    return this.over;
  }

  private sep(i: number, e: number): boolean {
    return i >= e || isBlank(this.t[i]);
  }

  private skipBlanks(p: number, e: number): number {
    while (p < e && isBlank(this.t[p])) p++;
    return p;
  }

  private scanLine(s: number, e: number): void {
    if (this.quote) {
      const q = this.closeQuote(s, e);
      if (q >= 0) this.afterScalar(q, e);
      return;
    }
    if (this.flowOpen.length > 0) return this.inFlow(s, e);
    const p = this.skipBlanks(s, e);
    if (p === e) return;
    const n = p - s;
    if (this.blockParent !== undefined) {
      if (n > this.blockParent) return;
      this.blockParent = undefined;
    }
    const plainOwner = this.plainOwner;
    this.plainOwner = undefined;
    if (this.t[p] === '#') return;
    if (n === 0 && /^(---|\.\.\.)$/.test(this.t.slice(s, s + 3)) && this.sep(s + 3, e)) {
      this.cols.length = this.kinds.length = 0;
      const v = this.skipBlanks(s + 3, e);
      if (v < e) this.node(v, e, false, -1);
      return;
    }
    if (plainOwner !== undefined && n > plainOwner) return this.plain(p, e, plainOwner);
    if (n === 0 && this.t[p] === '%') return;
    this.popDeeper(n);
    this.indicators(p, e);
  }

  private popDeeper(col: number): void {
    while (this.cols.length && this.cols[this.cols.length - 1]! > col) {
      this.cols.pop();
      this.kinds.pop();
    }
  }

  /** A block collection whose entry starts at `col`: the one open there, or a new level. */
  private enter(col: number, kind: number): boolean {
    this.popDeeper(col);
    const top = this.cols.length - 1;
    if (top >= 0 && this.cols[top] === col) {
      if (this.kinds[top] === kind) return true;
      // a sequence at its mapping's own indentation ends where the mapping's next key starts
      if (kind === MAP) {
        this.cols.pop();
        this.kinds.pop();
        if (top > 0 && this.cols[top - 1] === col && this.kinds[top - 1] === MAP) return true;
      }
    }
    this.cols.push(col);
    this.kinds.push(kind);
    return this.within();
  }

  private within(): boolean {
    if (this.cols.length + this.flowOpen.length + this.pairs <= this.max) return true;
    this.over = this.line;
    return false;
  }

  /** `- `, `? ` and `: ` at the line's start, each an entry one level deeper than the one before. */
  private indicators(p: number, e: number): void {
    let owner = this.cols.length ? this.cols[this.cols.length - 1]! : -1;
    for (;;) {
      const c = this.t[p];
      if (!((c === '-' || c === '?' || c === ':') && this.sep(p + 1, e))) break;
      owner = p - this.lineStart;
      if (!this.enter(owner, c === '-' ? SEQ : MAP)) return;
      p = this.skipBlanks(p + 1, e);
      if (p === e) return;
    }
    this.node(p, e, true, owner);
  }

  /** A node starting at `p` (a key when `keyed` and one follows); `owner` the column a block scalar's text is deeper than. */
  private node(p: number, e: number, keyed: boolean, owner: number): void {
    while (p < e && (this.t[p] === '&' || this.t[p] === '!'))
      p = this.skipBlanks(this.skipProperty(p, e), e);
    const c = this.t[p];
    if (p >= e || c === '#') return;
    if (c === '[' || c === '{') return this.inFlow(p, e);
    if (c === '|' || c === '>') {
      this.blockParent = owner;
      return;
    }
    if (c === '"' || c === "'") {
      this.quote = c;
      const q = this.closeQuote(p + 1, e);
      if (q >= 0) this.afterScalar(q, e, keyed ? p - this.lineStart : undefined);
      return;
    }
    if (c !== '*') this.plain(p, e, owner);
  }

  /** After an anchor (`&a`), an alias (`*a`) or a tag (`!t`, `!<t>`) at `p`, as the yaml library's lexer ends each. */
  private skipProperty(p: number, e: number): number {
    const t = this.t;
    if (t[p] === '!' && t[p + 1] === '<') {
      while (p < e && !isBlank(t[p]) && t[p] !== '>') p++;
      return p < e && t[p] === '>' ? p + 1 : p;
    }
    if (t[p] === '!') {
      for (p++; p < e; p++) {
        if (t[p] === '%' && /^[0-9A-Fa-f]{2}$/.test(t.slice(p + 1, p + 3))) p += 2;
        else if (!TAG_CHARS.test(t[p]!)) break;
      }
      return p;
    }
    for (p++; p < e && !isBlank(t[p]) && !isFlowIndicator(t[p]); p++);
    return p;
  }

  /**
   * A plain scalar from `p` in block context: its quotes and brackets are text; ": " ends it as a
   * key (the library lexes `a: b: c` as keys too), " #" as a comment; else it may go on over the
   * lines deeper than `owner`.
   */
  private plain(p: number, e: number, owner: number): void {
    for (let i = p; i < e; i++) {
      if (this.t[i] === '#' && (i === this.lineStart || isBlank(this.t[i - 1]))) return;
      if (this.t[i] === ':' && this.sep(i + 1, e)) {
        const col = p - this.lineStart;
        if (this.enter(col, MAP)) this.node(this.skipBlanks(i + 1, e), e, false, col);
        return;
      }
    }
    this.plainOwner = owner;
  }

  /** After a quoted scalar or a flow collection ends: its value when it was a key. */
  private afterScalar(p: number, e: number, keyCol?: number): void {
    if (this.flowOpen.length > 0) return this.inFlow(p, e);
    p = this.skipBlanks(p, e);
    if (this.t[p] !== ':' || !this.sep(p + 1, e)) return;
    const top = this.cols.length ? this.cols[this.cols.length - 1]! : -1;
    if (keyCol !== undefined && !this.enter(keyCol, MAP)) return;
    this.node(this.skipBlanks(p + 1, e), e, false, keyCol ?? top);
  }

  /** The index after the closing quote of the open scalar, or -1 when it goes on past the line. */
  private closeQuote(p: number, e: number): number {
    const q = this.quote;
    for (; p < e; p++) {
      const c = this.t[p];
      if (q === '"' && c === '\\') p++;
      else if (c === q) {
        if (q === "'" && this.t[p + 1] === "'") p++;
        else {
          this.quote = '';
          return p + 1;
        }
      }
    }
    return -1;
  }

  /**
   * A flow collection's text: brackets, and a `key: value` pair in a sequence, which is a mapping
   * of its own. A quote opens a quoted scalar only where a token starts; in a plain scalar
   * (`[a'b, …]`) it is text, up to the flow indicator, `: ` or ` #` that ends the scalar.
   */
  private inFlow(p: number, e: number): void {
    for (; p < e; p++) {
      const c = this.t[p];
      if (this.flowPlain) {
        if (c === '#' && p === this.lineStart) return;
        if (isBlank(c) && this.t[p + 1] === '#') return;
        if (
          !isFlowIndicator(c) &&
          !(c === ':' && (this.sep(p + 1, e) || isFlowIndicator(this.t[p + 1])))
        )
          continue;
        this.flowPlain = false;
      }
      if (isBlank(c)) continue;
      if (c === '#') return;
      if (!this.flowToken(p, e)) return;
      if (this.quoteEnd >= 0) p = this.quoteEnd - 1;
    }
  }

  /** The index after the quoted scalar or property flowToken last passed, or -1. */
  private quoteEnd = -1;

  /** The token at `p` in a flow collection; false when the line is done with (a quote runs on, the bound broke, the flow ended). */
  private flowToken(p: number, e: number): boolean {
    const c = this.t[p];
    const next = this.t[p + 1];
    this.quoteEnd = -1;
    if (c === '"' || c === "'") {
      this.quote = c;
      this.quoteEnd = this.closeQuote(p + 1, e);
      return this.quoteEnd >= 0;
    }
    if (c === '&' || c === '!' || c === '*') {
      this.quoteEnd = this.skipProperty(p, e);
      return true;
    }
    if (c === '[' || c === '{') {
      this.flowOpen.push(c);
      this.flowPair.push(false);
      return this.within();
    }
    if (
      c === ':' &&
      (this.sep(p + 1, e) || isFlowIndicator(next) || /["'\]}]/.test(this.t[p - 1]!))
    ) {
      if (this.flowOpen.at(-1) !== '[' || this.flowPair.at(-1)) return true;
      this.flowPair[this.flowPair.length - 1] = true;
      this.pairs++;
      return this.within();
    }
    if ((c === '?' || c === '-') && (this.sep(p + 1, e) || isFlowIndicator(next))) return true;
    if (c === ',') {
      if (this.flowPair.at(-1)) {
        this.flowPair[this.flowPair.length - 1] = false;
        this.pairs--;
      }
    } else if (c === ']' || c === '}') {
      this.flowOpen.pop();
      if (this.flowPair.pop()) this.pairs--;
      if (this.flowOpen.length === 0) {
        this.afterScalar(p + 1, e);
        return false;
      }
    } else this.flowPlain = true;
    return true;
  }
}

/** The line (1-based) where YAML `text` first nests deeper than `max` levels, or undefined. */
export function yamlTooDeep(text: string, max: number): number | undefined {
  return new YamlDepthScan(text, max).run();
}
