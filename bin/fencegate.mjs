#!/usr/bin/env node
// Runs the build (npm run build → dist/, a bundle) when it is fresh: no loader, ~0.4 s faster
// to start and ~45 MB smaller resident. Otherwise runs the TypeScript sources directly
// through tsx's loader: one artefact to ship to a Pi, no build step to forget.
import { fileURLToPath } from "node:url";
import { DIST_MAIN, useDist } from "./dist.mjs";

if (useDist()) {
  await import(DIST_MAIN);
} else {
  const { register } = await import("tsx/esm/api");
  // The checkout's tsconfig.json, wherever the command runs from: its paths resolve the
  // workspace packages (fencegate-client) to their sources.
  register({ tsconfig: fileURLToPath(new URL("../tsconfig.json", import.meta.url)) });
  await import("../src/cli/main.ts");
}
