// Starts the journal worker from the TypeScript sources (the compiled build runs
// sqlite-worker.js directly). `--import tsx` in a worker's execArgv does not reach the
// worker's own entry module on Node 20, so the loader is registered here, before it loads.
import { register } from "tsx/esm/api";

register();
await import(new URL("./sqlite-worker.ts", import.meta.url).href);
