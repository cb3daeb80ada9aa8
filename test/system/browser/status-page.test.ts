/// <reference lib="dom" />
/**
 * The status page in a real browser (Debian's chromium, headless, driven by playwright-core)
 * against the real daemon, Mosquitto and the simulated valves: what an operator sees, live,
 * without reloading. With UPDATE_SCREENSHOT=1 it also writes the README's screenshot,
 * docs/status-page.png.
 */
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchChromium } from "../../support/chromium.ts";
import { TestController } from "../../support/controller.ts";
import { valve, valvePoints } from "../../support/daemon.ts";
import { freePort } from "../../support/ports.ts";
import { Teardown, startStack } from "../../support/stack.ts";

const SCREENSHOT = resolve(import.meta.dirname, "../../../docs/status-page.png");

const teardown = new Teardown();
let base: string;
let page: Page;
let context: BrowserContext;
let a: TestController;
let b: TestController;
const requested: string[] = [];

/** The valve as the README's screenshot shows it: points with their units. */
function valveWithUnits(id: string, unit: number) {
  const points = valvePoints("fenced");
  return valve(id, "sim", unit, "fenced", {
    points: { ...points, position: { ...points.position, unit: "%" }, actual: { ...points.actual, unit: "%" } },
    expiry: { policy: "safe", set: { position: 0 } },
  });
}

beforeAll(async () => {
  const port = await freePort();
  const stack = await startStack(teardown, {
    name: "browser",
    sim: () => ({ units: [1, 2], rate: 0 }),
    gateway: ({ host, port: simPort }) => ({
      buses: { sim: { type: "tcp", host, port: simPort, timeoutMs: 500 } },
      actuators: [valveWithUnits("valve-1", 1), valveWithUnits("valve-2", 2)],
      metricsPort: port,
    }),
    fenced: ["valve-1", "valve-2"],
  });
  base = `http://127.0.0.1:${port}`;
  a = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  b = teardown.add(await TestController.connect(stack.broker.url, "line-b"), (c) => c.close());
  context = await launchChromium(teardown, { width: 1100, height: 900 });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("request", (r) => requested.push(r.url()));
  await page.goto(base);
  await page.waitForSelector('[data-actuator="valve-1"]');
  await page.waitForFunction(() => document.getElementById("gw-live")?.textContent === "live");
});

afterAll(() => teardown.run());

const card = (id: string) => `#actuators [data-actuator="${id}"]`;
const text = (selector: string) => page.textContent(selector);

describe("the status page in a browser", () => {
  it("shows the gateway and the actuator, online, with its points and units", async () => {
    expect(await text("#gw-id")).toBe("test");
    expect(await text("#gw-broker")).toBe("connected");
    expect(await text("#gw-buses")).toBe("sim up");
    await page.waitForFunction((sel) => document.querySelector(`${sel} .link`)?.textContent === "online", card("valve-1"));
    expect(await text(`${card("valve-1")} .holder`)).toBe("free");
    expect(await page.locator(`${card("valve-1")} .points tr`).allTextContents()).toEqual(["position0%", "actual0%", "status0"]);
  });

  it("shows the holder and token within a second of a grant, without reloading", async () => {
    const navigations = (await page.evaluate(() => performance.getEntriesByType("navigation").length)) as number;
    const reply = await a.acquire("valve-1", 30_000);
    expect(reply).toMatchObject({ ok: true });
    const token = String(reply.lease.token);
    await page.waitForFunction(
      ([sel, t]) =>
        document.querySelector(`${sel} .holder`)?.textContent === "line-a" && document.querySelector(`${sel} .token`)?.textContent === t,
      [card("valve-1"), token] as const,
      { timeout: 1000 },
    );
    expect(await text(`${card("valve-1")} .expires`)).toMatch(/^\d+ s$|^\d+\.\d s$/);
    expect(await page.evaluate(() => performance.getEntriesByType("navigation").length)).toBe(navigations);
  });

  it("lists a stale command in the feed as refused with STALE_TOKEN", async () => {
    const old = (await a.acquire("valve-1", 30_000)).lease.token as number;
    for (let seq = 1; seq <= 5; seq++)
      expect(await a.command("valve-1", old, seq, { position: seq * 10 })).toMatchObject({ ok: true, outcome: "applied" });
    expect(await a.request("valve-1", "lease/release", { holder: "line-a", token: old })).toMatchObject({ ok: true });
    const newer = (await b.acquire("valve-1", 30_000)).lease.token as number;
    expect(await a.command("valve-1", old, 6, { position: 99 })).toMatchObject({ ok: false, error: { code: "STALE_TOKEN" } });
    const refused = page.locator('#feed li[data-type="rejected"][data-code="STALE_TOKEN"][data-actuator="valve-1"]');
    await refused.first().waitFor({ timeout: 1000 });
    expect(await refused.first().textContent()).toMatch(new RegExp(`valve-1 refused STALE_TOKEN line-a t${old}/s6$`));
    await page.waitForFunction((sel) => document.querySelector(`${sel} .refusal`)?.textContent?.startsWith("STALE_TOKEN"), card("valve-1"));
    expect(await text(`${card("valve-1")} .refusal`)).toMatch(new RegExp(`^STALE_TOKEN · line-a t${old}/s6 · \\d+(\\.\\d)? s ago$`));
    expect(await text(`${card("valve-1")} .token`)).toBe(String(newer));
    expect(await text(`${card("valve-1")} .accepted`)).toBe(`line-a t${old}/s5 position=50 → applied`);
  });

  it("shows how long the gateway has run as soon as it shows the gateway", async () => {
    const fresh = await context.newPage();
    try {
      // Read at the first change of the gateway's id, in the same turn as the page drew it.
      await fresh.addInitScript(() => {
        document.addEventListener("DOMContentLoaded", () => {
          const id = document.getElementById("gw-id")!;
          new MutationObserver((_, observer) => {
            observer.disconnect();
            (window as unknown as { uptimeAtFirstDraw: string | null }).uptimeAtFirstDraw =
              document.getElementById("gw-uptime")!.textContent;
          }).observe(id, { childList: true, characterData: true, subtree: true });
        });
      });
      await fresh.goto(base);
      const uptime = await fresh.waitForFunction(() => (window as unknown as { uptimeAtFirstDraw?: string }).uptimeAtFirstDraw);
      expect(await uptime.jsonValue()).toMatch(/^\d+(\.\d)? (s|min|h|d)$/);
    } finally {
      await fresh.close();
    }
  });

  it("filters the actuators by a counter", async () => {
    const counter = page.locator("#counters button", { hasText: "STALE_TOKEN" });
    await counter.waitFor({ timeout: 3000 }); // counters come with the gateway line, every 2 s
    await counter.click();
    expect(await page.isVisible(card("valve-1"))).toBe(true);
    expect(await page.isHidden(card("valve-2"))).toBe(true);
    await page.click("#filter-clear");
    expect(await page.isVisible(card("valve-2"))).toBe(true);
  });

  it("holds the feed while paused and shows what came meanwhile on resume", async () => {
    await page.click("#pause");
    const token = Number(await text(`${card("valve-1")} .token`));
    expect(await b.command("valve-1", token, 1, { position: 33 })).toMatchObject({ ok: true });
    await page.waitForFunction(() => /^\d+ new while paused$/.test(document.getElementById("feed-note")?.textContent ?? ""), undefined, {
      timeout: 1000,
    });
    expect(await page.locator('#feed li[data-type="applied"]', { hasText: "line-b" }).count()).toBe(0);
    await page.click("#pause");
    expect(await page.locator('#feed li[data-type="applied"]', { hasText: "line-b" }).count()).toBe(1);
  });

  it("lists the applied commands of the audit trail in order, newest first, filtered and paged", async () => {
    await page.click(`${card("valve-1")} .open-audit`);
    await page.waitForFunction(() => (document.getElementById("audit-rows")?.childElementCount ?? 0) > 0);
    const rows = async () =>
      page.locator("#audit-rows tr").evaluateAll((trs) =>
        trs.map((tr) =>
          Array.from(tr.children)
            .slice(1)
            .map((td) => td.textContent),
        ),
      );
    expect((await rows()).map((r) => r.join(" "))).toEqual([
      expect.stringMatching(/^line-b \d+ 1 position=33 applied$/),
      ...[5, 4, 3, 2, 1].map((seq) => expect.stringMatching(new RegExp(`^line-a \\d+ ${seq} position=${seq * 10} applied$`))),
    ]);
    expect(await page.locator("#audit-rows tr td:first-child").first().textContent()).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/);
    // The times are the journal's (when it recorded each command), and the page says so.
    expect(await text("#audit thead th:first-child")).toBe("recorded");
    expect(await text("#audit-note")).toContain("Times are when the journal recorded each command");
    await page.fill("#audit-filter input[name=holder]", "line-a");
    await page.selectOption("#audit-filter select[name=outcome]", "applied");
    await page.click("#audit-filter button[type=submit]");
    await page.waitForFunction(() => document.getElementById("audit-rows")?.childElementCount === 5);
    expect((await rows()).map((r) => r[2])).toEqual(["5", "4", "3", "2", "1"]);
    expect(await page.isDisabled("#audit-older")).toBe(true);
  });

  it("reads on a phone: nothing wider than the screen", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(100);
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await page.setViewportSize({ width: 1100, height: 900 });
  });

  it("asks nothing of any host but the gateway", async () => {
    expect(requested.length).toBeGreaterThan(3);
    const foreign = requested.filter((u) => !u.startsWith(`${base}/`) && !u.startsWith("data:"));
    expect(foreign).toEqual([]);
  });

  it("takes the README's screenshot", async () => {
    await page.click("#audit-close");
    await page.evaluate(() => window.scrollTo(0, 0));
    const png = await page.screenshot({ fullPage: true });
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    if (process.env.UPDATE_SCREENSHOT) writeFileSync(SCREENSHOT, png);
  });
});
