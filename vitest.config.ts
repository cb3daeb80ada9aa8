import { defineConfig } from "vitest/config";

export default defineConfig({
  // The workspace packages by name from their sources (tsconfig.json's paths).
  resolve: { tsconfigPaths: true },
  test: {
    include: ["test/**/*.test.ts", "packages/*/test/**/*.test.ts", "firmware-bridge/test/**/*.test.ts"],
    // Integration tests spawn real processes (mosquitto, socat, the daemon); give them room
    // but never retry: a flaky test is a bug to find, not to hide.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    retry: 0,
  },
});
