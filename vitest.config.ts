import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "firmware-bridge/test/**/*.test.ts"],
    // Integration tests spawn real processes (mosquitto, socat, the daemon); give them room
    // but never retry: a flaky test is a bug to find, not to hide.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    retry: 0,
  },
});
