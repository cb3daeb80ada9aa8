/** Command → the Debian package that has it: the tools the test suite drives. */
export declare const TEST_TOOLS: Readonly<Record<string, string>>;
/** Packages in package.json (and its workspaces') that node_modules under `root` lacks. */
export declare function missingPackages(root?: string): string[];
/** The Debian packages whose commands are not on PATH. */
export declare function missingTools(): string[];
