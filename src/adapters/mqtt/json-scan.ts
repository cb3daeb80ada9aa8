/**
 * A second, structural pass over JSON text that `JSON.parse` has already accepted, for the
 * two things `JSON.parse` hides: the raw text of numbers (Node 20 has no source-text access
 * in revivers, and `9007199254740991.4` or `1.0` parse to safe-looking integers) and
 * duplicate keys (`JSON.parse` silently keeps the last one).
 *
 * Iterative with an explicit stack, so deep nesting cannot overflow the call stack.
 * Only valid JSON may be passed in: the scanner trusts the grammar.
 */

export interface JsonScan {
  /** Root object only: field name → raw text of its value, when that value is a number. */
  readonly rootNumbers: ReadonlyMap<string, string>;
  /** The first key (in text order) that repeats within one object, with its parent's key. */
  readonly duplicate: { readonly key: string; readonly parent: string | null; readonly depth: number } | null;
}

interface Frame {
  readonly isObject: boolean;
  readonly keys: Set<string> | null;
  /** The key under which this container sits in its parent object, if any. */
  readonly parentKey: string | null;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function stringEnd(text: string, start: number): number {
  let i = start + 1;
  for (;;) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i + 1;
    else if (Number.isNaN(c))
      return text.length; // unreachable for valid JSON
    else i += 1;
  }
}

export function scanJson(text: string): JsonScan {
  const rootNumbers = new Map<string, string>();
  let duplicate: JsonScan["duplicate"] = null;
  const stack: Frame[] = [];
  let expectKey = false;
  let lastKey: string | null = null;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const ch = text[i] as string;
    switch (ch) {
      case "{":
      case "[": {
        const isObject = ch === "{";
        stack.push({ isObject, keys: isObject ? new Set() : null, parentKey: lastKey });
        expectKey = isObject;
        lastKey = null;
        i += 1;
        break;
      }
      case "}":
      case "]":
        stack.pop();
        expectKey = false;
        i += 1;
        break;
      case ",":
        expectKey = stack[stack.length - 1]?.isObject ?? false;
        i += 1;
        break;
      case ":":
      case " ":
      case "\t":
      case "\n":
      case "\r":
        i += 1;
        break;
      case '"': {
        const end = stringEnd(text, i);
        if (expectKey) {
          const raw = text.slice(i, end);
          const key = raw.includes("\\") ? (JSON.parse(raw) as string) : raw.slice(1, -1);
          const top = stack[stack.length - 1];
          if (top?.keys) {
            if (duplicate === null && top.keys.has(key)) {
              duplicate = { key, parent: top.parentKey, depth: stack.length };
            }
            top.keys.add(key);
          }
          lastKey = key;
          expectKey = false;
        }
        i = end;
        break;
      }
      default: {
        // A number or a literal (true, false, null): runs to the next delimiter.
        const start = i;
        while (i < n && !",}] \t\n\r".includes(text[i] as string)) i += 1;
        const root = stack[0];
        if (stack.length === 1 && root?.isObject && lastKey !== null) {
          const c = text.charCodeAt(start);
          if (c === 0x2d || (c >= 0x30 && c <= 0x39)) rootNumbers.set(lastKey, text.slice(start, i));
        }
        if (start === i) i += 1; // unreachable for valid JSON; guarantees progress
      }
    }
  }
  return { rootNumbers, duplicate };
}
