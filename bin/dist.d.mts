export declare const ROOT: string;
export declare const DIST: string;
/** Entry name (dist/<name>.js) → its source file (absolute). */
export declare const ENTRY_POINTS: Readonly<Record<string, string>>;
export declare const DIST_MAIN: string;
export declare const STAMP: string;
/** True when dist/ holds a build at least as new as every source file. */
export declare function distIsFresh(): boolean;
/** Whether bin/fencegate.mjs runs dist/: fresh, or forced by FENCEGATE_RUNTIME=dist|tsx. */
export declare function useDist(): boolean;
