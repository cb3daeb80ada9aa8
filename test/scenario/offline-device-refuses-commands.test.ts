/**
 * While the link to a device is down nothing is sent to it: a command already on its way is
 * answered DEVICE_UNAVAILABLE (not sent), later ones are refused with it at once, and once the
 * device answers a poll again it is online and commands go through.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a device whose link is down refuses commands DEVICE_UNAVAILABLE, untouched, and is online again once it answers a poll", async () => {
  const s = await Scenario.start();
  await s.acquire("line-a", 10_000);
  s.setLinkDown(true);

  // Before any poll noticed: accepted, handed to the port, which cannot send it.
  expect(await s.command("line-a", 1, 1, { position: 33 })).toMatchObject({ ok: false, error: { code: "DEVICE_UNAVAILABLE" } });
  expect(s.view().online).toBe(false);
  expect(await s.command("line-a", 1, 2, { position: 34 })).toMatchObject({
    ok: false,
    error: {
      code: "DEVICE_UNAVAILABLE",
      message: "The link to the device is down; the command was not sent.",
      fence: { token: 1, seq: 1 },
      lease: { holder: "line-a", token: 1 },
    },
  });
  expect(s.states.at(-1)).toMatchObject({ online: false, lease: { holder: "line-a", token: 1 } });
  expect(s.actedOn()).toEqual([]);

  s.setLinkDown(false);
  await s.advance(1_000); // the next poll is answered
  expect(s.states.at(-1)).toMatchObject({ online: true, lease: { holder: "line-a", token: 1 } });
  expect(await s.command("line-a", 1, 3, { position: 35 })).toMatchObject({ ok: true, outcome: "applied", token: 1, seq: 3 });
  expect(s.actedOn()).toEqual([{ token: 1, seq: 3, position: 35 }]);
});
