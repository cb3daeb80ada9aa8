import type { BuildOptions } from "esbuild";
/** The esbuild options of npm run build (dist/: the daemon and CLI bundle). */
export declare const BUILD_OPTIONS: BuildOptions;
