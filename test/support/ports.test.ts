import { describe, expect, it } from "vitest";
import { portBelowEphemeral } from "./ports.ts";

describe("portBelowEphemeral", () => {
  // A 3-member etcd asks six ports before binding any; two of them once came out equal
  // (e2 and e3 on one peer port), and etcd refused the cluster.
  it("never hands this process the same port twice, below the ephemeral range", async () => {
    const ports: number[] = [];
    for (let i = 0; i < 300; i++) ports.push(await portBelowEphemeral());
    expect(new Set(ports).size).toBe(ports.length);
    for (const port of ports) expect(port >= 20_000 && port < 32_768).toBe(true);
  });
});
