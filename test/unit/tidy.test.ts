// House rules a reviewer should not have to check by hand: no function grows past a screen
// or so without a reason written down, and nothing is exported that nobody imports.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const SOURCE = /\.(ts|mts|mjs|js|cjs)$/;
const MAX_FUNCTION_LINES = 80;

/** Functions allowed past MAX_FUNCTION_LINES, each with the reason it reads better whole. */
const LONG_FUNCTIONS: Record<string, string> = {
  "src/sim/run.ts:runSeed":
    "one seed's world, actors and event loop; its closures share the run's state, to be split with the in-process harness",
  "src/cli/controller.ts:runController": "one flat dispatch over the controller subcommands, each a few lines",
  "firmware-bridge/src/simulator.ts:startSimulator":
    "opens each station's transport and tears all down on a failed start, one sequence read top to bottom",
  "packages/node-red/nodes/lib/register.mjs:registerFencegateNodes":
    "Node-RED's node constructors must close over RED, so they are declared inside the registration",
  "packages/node-red/nodes/lib/register.mjs:FencegateCommandNode":
    "one Node-RED node: its input handler and the lease it keeps share the node's closure",
};

/**
 * Value exports used only in their own file, waiting to lose `export` when the file is next
 * rewritten (each is in a file being cut up or moved right now). Types used in their own file
 * stay exported: they are part of that module's signatures.
 */
const EXPORTED_FOR_OWN_FILE: string[] = [
  "src/adapters/mqtt/payloads.ts: stateJson",
  "src/adapters/mqtt/requests.ts: MAX_SET_POINTS",
  "src/config/schema.ts: RESERVED_ACTUATOR_IDS",
  "src/config/schema.ts: BAUD_RATES",
  "src/config/schema.ts: tcpEndpoint",
  "src/core/actuator.ts: safeRetryDelayMs",
  "src/core/actuator.ts: outcomeReply",
  "src/shell/refusal-summary.ts: REFUSAL_SUMMARY_MS",
  "src/shell/refusal-summary.ts: MAX_SUMMARY_KEYS",
];

/** Modules whose exports are used from outside the tree: package entries, the build's entry points. */
const ENTRY_POINTS = new Set(["src/client/index.ts", "src/cli/main.ts", "src/adapters/journal/worker.ts"]);
/** Bare specifiers that name a module of this tree (npm workspaces). */
const PACKAGES: Record<string, string> = { "fencegate-client": "src/client/index.ts" };

function walk(dir: string): string[] {
  if (!existsSync(join(ROOT, dir))) return [];
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? ["node_modules", "dist"].includes(e.name)
        ? []
        : walk(join(dir, e.name))
      : SOURCE.test(e.name)
        ? [join(dir, e.name)]
        : [],
  );
}

const parsed = new Map<string, ts.SourceFile>();
function parse(file: string): ts.SourceFile {
  let source = parsed.get(file);
  if (!source) parsed.set(file, (source = ts.createSourceFile(file, readFileSync(join(ROOT, file), "utf8"), ts.ScriptTarget.Latest, true)));
  return source;
}

const packages = readdirSync(join(ROOT, "packages")).flatMap((p) => [`packages/${p}/src`, `packages/${p}/nodes`]);
const shipped = ["src", "firmware-bridge/src", ...packages].flatMap(walk);
const everything = ["src", "packages", "bin", "bench", "test", "firmware-bridge", "examples"].flatMap(walk);

function lines(source: ts.SourceFile, node: ts.Node): number {
  return source.getLineAndCharacterOfPosition(node.getEnd()).line - source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
}

/** "file:name" of every function (declaration, method, const arrow) longer than the limit, with its length. */
function longFunctions(file: string): [string, number][] {
  const source = parse(file);
  const found: [string, number][] = [];
  const visit = (node: ts.Node, owner: string): void => {
    let name: string | undefined;
    if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node) || ts.isGetAccessor(node)) && node.name)
      name = node.name.getText(source);
    else if (ts.isConstructorDeclaration(node)) name = "constructor";
    else if ((ts.isArrowFunction(node) || ts.isFunctionExpression(node)) && ts.isVariableDeclaration(node.parent))
      name = node.parent.name.getText(source);
    if (name && lines(source, node) > MAX_FUNCTION_LINES) found.push([`${file}:${owner}${name}`, lines(source, node)]);
    const inner = ts.isClassLike(node) && node.name ? `${node.name.text}.` : owner;
    ts.forEachChild(node, (child) => visit(child, inner));
  };
  visit(source, "");
  return found;
}

/** The names taken from `(await import(x)).name` or `const { a, b } = await import(x)`; "*" for any other use. */
function dynamicNames(call: ts.CallExpression): string[] {
  let node: ts.Node = call.parent;
  while (ts.isParenthesizedExpression(node) || ts.isAwaitExpression(node)) node = node.parent;
  if (ts.isPropertyAccessExpression(node)) return [node.name.text];
  if (ts.isVariableDeclaration(node) && ts.isObjectBindingPattern(node.name) && node.name.elements.every((e) => !e.dotDotDotToken)) {
    return node.name.elements.map((e) => (e.propertyName ?? e.name).getText());
  }
  return ["*"];
}

/** The names each file imports from each module it resolves to ("*" when it may use any). */
function imports(): Map<string, Set<string>> {
  const used = new Map<string, Set<string>>();
  for (const file of everything) {
    const use = (spec: ts.Node | undefined, names: string[]) => {
      if (!spec || !ts.isStringLiteralLike(spec)) return;
      const target = spec.text.startsWith(".") ? relative(ROOT, resolve(ROOT, dirname(file), spec.text)) : PACKAGES[spec.text];
      if (!target || target === file) return;
      const set = used.get(target) ?? new Set();
      for (const n of names) set.add(n);
      used.set(target, set);
    };
    const visit = (node: ts.Node): void => {
      if (ts.isImportDeclaration(node)) {
        const clause = node.importClause;
        const bound = clause?.namedBindings;
        const names = bound && ts.isNamedImports(bound) ? bound.elements.map((e) => (e.propertyName ?? e.name).text) : bound ? ["*"] : [];
        use(node.moduleSpecifier, clause?.name ? [...names, "default"] : names);
      } else if (ts.isExportDeclaration(node)) {
        const clause = node.exportClause;
        use(
          node.moduleSpecifier,
          clause && ts.isNamedExports(clause) ? clause.elements.map((e) => (e.propertyName ?? e.name).text) : ["*"],
        );
      } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
        use(node.argument.literal, [node.qualifier ? node.qualifier.getText().split(".")[0]! : "*"]);
      } else if (
        ts.isCallExpression(node) &&
        (node.expression.kind === ts.SyntaxKind.ImportKeyword || node.expression.getText() === "require")
      ) {
        use(node.arguments[0], dynamicNames(node));
      }
      ts.forEachChild(node, visit);
    };
    visit(parse(file));
  }
  return used;
}

type Export = { name: string; type: boolean; local: boolean };

/** What a module exports by its own declarations (re-exports count as imports instead), and whether its own file names it. */
function exportsOf(file: string): Export[] {
  const source = parse(file);
  const declared: { name: string; type: boolean; at?: ts.Node }[] = [];
  for (const statement of source.statements) {
    const isType = ts.isInterfaceDeclaration(statement) || ts.isTypeAliasDeclaration(statement);
    if (
      ts.isExportDeclaration(statement) &&
      !statement.moduleSpecifier &&
      statement.exportClause &&
      ts.isNamedExports(statement.exportClause)
    ) {
      declared.push(...statement.exportClause.elements.map((e) => ({ name: e.name.text, type: statement.isTypeOnly || e.isTypeOnly })));
    } else if (ts.isExportAssignment(statement)) declared.push({ name: "default", type: false });
    else if (ts.canHaveModifiers(statement) && ts.getModifiers(statement)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) {
      if (ts.getModifiers(statement)?.some((m) => m.kind === ts.SyntaxKind.DefaultKeyword)) declared.push({ name: "default", type: false });
      else if (ts.isVariableStatement(statement))
        declared.push(...statement.declarationList.declarations.map((d) => ({ name: d.name.getText(source), type: false, at: d.name })));
      else if ("name" in statement && statement.name && ts.isIdentifier(statement.name as ts.Node))
        declared.push({ name: (statement.name as ts.Identifier).text, type: isType, at: statement.name as ts.Node });
    }
  }
  const mentions = new Map<string, number>();
  const count = (node: ts.Node): void => {
    if (ts.isIdentifier(node) && !ts.isExportSpecifier(node.parent)) mentions.set(node.text, (mentions.get(node.text) ?? 0) + 1);
    ts.forEachChild(node, count);
  };
  count(source);
  return declared.map(({ name, type, at }) => ({ name, type, local: (mentions.get(name) ?? 0) > (at ? 1 : 0) }));
}

describe("tidy", () => {
  it(`no function is longer than ${MAX_FUNCTION_LINES} lines outside the allow-list`, () => {
    const long = shipped.flatMap(longFunctions);
    expect(long.filter(([key]) => !(key in LONG_FUNCTIONS))).toEqual([]);
    // An entry whose function shrank or went away leaves the list.
    expect(Object.keys(LONG_FUNCTIONS).filter((key) => !long.some(([k]) => k === key))).toEqual([]);
  });

  it("every export of src/ is imported somewhere", () => {
    const used = imports();
    const unimported = walk("src")
      .filter((file) => /\.m?ts$/.test(file) && !ENTRY_POINTS.has(file))
      .flatMap((file) =>
        exportsOf(file)
          .filter((e) => !used.get(file)?.has(e.name) && !used.get(file)?.has("*"))
          .map((e) => ({ key: `${file}: ${e.name}`, ...e })),
      );
    // Used nowhere at all: delete it.
    expect(unimported.filter((e) => !e.local).map((e) => e.key)).toEqual([]);
    // Used only beside itself: drop the `export`.
    const ownFile = unimported.filter((e) => e.local && !e.type).map((e) => e.key);
    expect(ownFile.filter((key) => !EXPORTED_FOR_OWN_FILE.includes(key))).toEqual([]);
    expect(EXPORTED_FOR_OWN_FILE.filter((key) => !ownFile.includes(key))).toEqual([]);
  });
});
