/**
 * Debian's chromium, headless, driven by playwright-core: the one launch every browser test and
 * the status bench share. A fresh profile each time (no state from another run), and flags
 * that keep it off the network: the tests use loopback only.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext } from "playwright-core";
import type { Teardown } from "./stack.ts";

export const CHROMIUM = "/usr/bin/chromium";

const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export function chromiumInstalled(): boolean {
  return existsSync(CHROMIUM);
}

/** A browser context on a fresh profile; `teardown` closes it and removes the profile. */
export async function launchChromium(teardown: Teardown, viewport?: { width: number; height: number }): Promise<BrowserContext> {
  if (!chromiumInstalled()) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does).`);
  const profile = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-chromium-")), (d) => rmSync(d, { recursive: true, force: true }));
  return teardown.add(
    await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_FLAGS,
      ...(viewport ? { viewport } : {}),
    }),
    (c) => c.close(),
  );
}
