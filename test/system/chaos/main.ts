/**
 * `npm run chaos [-- --kills N --seed S --controllers N --ttl-ms N --restarts N --keep]`: the full chaos
 * run on real processes (see harness.ts). `npm run chaos -- --group [--faults N --lease-ttl-ms N]`:
 * the gateway group's (see group.ts). Exits 1 on any safety violation, printing the seed that
 * replays the schedule.
 */
import { parseArgs } from "node:util";
import { runGroupChaos } from "./group.ts";
import { report, runChaos } from "./harness.ts";

const USAGE =
  "usage: npm run chaos -- [--kills N] [--seed S] [--controllers N] [--ttl-ms N] [--life-min-ms N] [--life-max-ms N] [--restarts N] [--keep] [--quiet]\n" +
  "       npm run chaos -- --group [--faults N] [--lease-ttl-ms N] [--seed S] [--keep]";

function args() {
  try {
    return parseArgs({ options: OPTIONS });
  } catch (err) {
    console.error(`${(err as Error).message}\n${USAGE}`);
    process.exit(64);
  }
}

const OPTIONS = {
  kills: { type: "string", default: "100" },
  seed: { type: "string" },
  controllers: { type: "string", default: "3" },
  "ttl-ms": { type: "string", default: "2000" },
  "life-min-ms": { type: "string", default: "300" },
  "life-max-ms": { type: "string", default: "3000" },
  restarts: { type: "string" },
  keep: { type: "boolean", default: false },
  quiet: { type: "boolean", default: false },
  group: { type: "boolean", default: false },
  faults: { type: "string", default: "60" },
  "lease-ttl-ms": { type: "string", default: "3000" },
  help: { type: "boolean", default: false },
} as const;

const { values } = args();
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const seed = values.seed !== undefined ? Number(values.seed) : Date.now() % 2 ** 31;
if (values.group) {
  console.log(`chaos: --group --faults ${values.faults} --seed ${seed}`);
  const result = await runGroupChaos({
    faults: Number(values.faults),
    seed,
    controllers: Number(values.controllers),
    ttlMs: Number(values["ttl-ms"]),
    leaseTtlMs: Number(values["lease-ttl-ms"]),
    keep: values.keep,
    say: values.quiet ? () => {} : (line) => console.log(line),
  });
  console.log(report(result));
  process.exit(result.verdict.violations.length === 0 ? 0 : 1);
}
console.log(`chaos: --kills ${values.kills} --seed ${seed}`);
const result = await runChaos({
  kills: Number(values.kills),
  seed,
  controllers: Number(values.controllers),
  ttlMs: Number(values["ttl-ms"]),
  lifeMs: [Number(values["life-min-ms"]), Number(values["life-max-ms"])],
  keep: values.keep,
  ...(values.restarts !== undefined ? { controllerRestarts: Number(values.restarts) } : {}),
  say: values.quiet ? () => {} : (line) => console.log(line),
});
console.log(report(result));
process.exit(result.verdict.violations.length === 0 ? 0 : 1);
