// The layers' import rules (docs/architecture.md), and that system tests start processes only
// through test/support, read from every import in the tree:
// static `import`/`export ... from`, dynamic `import()` and `require()`, relative paths resolved.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const SOURCE = /\.(ts|mts|mjs|js|cjs)$/;
const PROTOCOL = "@fencegate/protocol";

/** Imports that break a rule today, each waiting for the change that removes it. */
const KNOWN_VIOLATIONS: Record<string, string[]> = {
  // Tools that run the simulated device itself: `fencegate sim`, the demo, the simulator's device port.
  "src/cli/main.ts": ["firmware-bridge/src/cli.ts"],
  "src/cli/start.ts": ["firmware-bridge/src/simulator.ts"],
  "src/dev/demo.ts": ["firmware-bridge/src/simulator.ts"],
  "src/sim/device.ts": ["firmware-bridge/src/device.ts"],
};

function walk(dir: string): string[] {
  if (!existsSync(join(ROOT, dir))) return [];
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? e.name === "node_modules" || e.name === "dist"
        ? []
        : walk(join(dir, e.name))
      : SOURCE.test(e.name)
        ? [join(dir, e.name)]
        : [],
  );
}

const packages = readdirSync(join(ROOT, "packages"));
const files = [
  "src",
  "firmware-bridge/src",
  ...packages.flatMap((p) => [`packages/${p}/src`, `packages/${p}/nodes`]),
  "test/system",
].flatMap(walk);

type Import = { file: string; target: string; names: string[] };

/** Every module a file names, as a repo-relative path (relative specifiers) or as written (packages, node:). */
function importsOf(file: string): Import[] {
  const source = ts.createSourceFile(file, readFileSync(join(ROOT, file), "utf8"), ts.ScriptTarget.Latest, true);
  const found: Import[] = [];
  const add = (spec: ts.Node, names: string[] = []) => {
    if (!ts.isStringLiteralLike(spec)) return;
    const target = spec.text.startsWith(".") ? relative(ROOT, resolve(ROOT, dirname(file), spec.text)) : spec.text;
    found.push({ file, target, names });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      const bindings = node.importClause?.namedBindings;
      add(
        node.moduleSpecifier,
        bindings && ts.isNamedImports(bindings) ? bindings.elements.map((e) => (e.propertyName ?? e.name).text) : ["*"],
      );
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier) add(node.moduleSpecifier, ["*"]);
    else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(node.expression) && node.expression.text === "require"))
    )
      if (node.arguments[0]) add(node.arguments[0], ["*"]);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const under = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`);
const isProtocol = (target: string) => target === PROTOCOL || target.startsWith(`${PROTOCOL}/`) || under(target, "packages/protocol");

/** Why an import breaks a layer rule, or undefined when it keeps them. */
function breaks({ file, target, names }: Import): string | undefined {
  if (under(file, "src/core")) {
    if (under(target, "src/core") || isProtocol(target)) return undefined;
    return "the core imports only itself and the protocol package";
  }
  if (under(file, "packages/protocol")) {
    if (
      under(target, "packages/protocol") ||
      (target === "node:crypto" && names.every((n) => n === "createHmac" || n === "timingSafeEqual"))
    )
      return undefined;
    return "the protocol package imports only itself and node:crypto's HMAC: no I/O, no runtime dependency";
  }
  if (under(target, "firmware-bridge") && under(file, "src")) return "src never imports the simulated device (firmware-bridge/)";
  if (under(file, "src/adapters") && under(target, "src/shell") && target !== "src/shell/ports.ts")
    return "adapters import only the shell's ports";
  if (under(file, "src/adapters") && under(target, "src/config"))
    return "adapters take options, never the configuration (src/config maps it onto them)";
  if (under(file, "src/shell") && under(target, "src/adapters")) return "the shell is handed adapters, it never imports them";
  if (under(file, "src/shell") && file !== "src/shell/gateway.ts" && target === "src/shell/gateway.ts")
    return "no piece of the shell holds the gateway that owns it: it is fed inputs or handed services";
  if (under(file, "src/shell") && target === "node:crypto")
    return "the shell draws random bytes through its Random port, so the simulator seeds them";
  if (under(file, "packages") && under(target, "src")) return "packages never reach into src/";
  if (under(file, "test/system") && (target === "node:child_process" || target === "child_process"))
    return "system tests start processes through test/support/processes.ts, whose Teardown stops them";
  return undefined;
}

/** A package's build that compiles files out of src/ is a reach into it too. */
function tsconfigReaches(): Import[] {
  return packages.flatMap((p) => {
    const file = `packages/${p}/tsconfig.json`;
    if (!existsSync(join(ROOT, file))) return [];
    const { config } = ts.parseConfigFileTextToJson(file, readFileSync(join(ROOT, file), "utf8"));
    const included: string[] = [...(config.include ?? []), ...(config.files ?? [])];
    return included.map((i) => ({ file, target: relative(ROOT, resolve(ROOT, dirname(file), i)), names: [] }));
  });
}

const violations = [...files.flatMap(importsOf), ...tsconfigReaches()].flatMap((i) => {
  const why = breaks(i);
  return why ? [{ ...i, why }] : [];
});
const known = (v: Import) => KNOWN_VIOLATIONS[v.file]?.includes(v.target) ?? false;

describe("layer boundaries", () => {
  it("reads a tree with imports in it", () => {
    expect(files.length).toBeGreaterThan(50);
    expect(files.flatMap(importsOf).length).toBeGreaterThan(200);
    expect(files.filter((f) => under(f, "test/system")).length).toBeGreaterThan(30);
  });

  it("no import crosses a layer outside the known list", () => {
    const fresh = violations.filter((v) => !known(v)).map((v) => `${v.file} imports ${v.target}: ${v.why}`);
    expect(fresh).toEqual([]);
  });

  it("every known violation still exists (remove the entry once it is fixed)", () => {
    const stale = Object.entries(KNOWN_VIOLATIONS).flatMap(([file, targets]) =>
      targets.filter((target) => !violations.some((v) => v.file === file && v.target === target)).map((target) => `${file} -> ${target}`),
    );
    expect(stale).toEqual([]);
  });
});
