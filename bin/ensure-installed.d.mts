/** Command → the Debian package that has it: the tools the test suite drives. */
export declare const TEST_TOOLS: Readonly<Record<string, string>>;
/** Whether a Node version (22.9.0) lies in an engines range (">=22.9", "^20.19.0 || ^22.12.0"); false for one it cannot read. */
export declare function satisfiesEngine(version: string, range: string): boolean;
/** Packages in package.json (and its workspaces') that node_modules under `root` lacks; their optional ones where `nodeVersion` can run them (by the lockfile). */
export declare function missingPackages(root?: string, nodeVersion?: string): string[];
/** The Debian packages whose commands are not on PATH. */
export declare function missingTools(): string[];
