/** `fencegate doctor --config FILE`: what is wrong with a configuration and this machine, and how to fix it. */
import { parseCommandLine } from "./args.ts";
import { runDoctor, type Finding, type Status } from "../doctor/checks.ts";
import { EXIT } from "../exit-codes.ts";

const HELP = `usage: fencegate doctor --config FILE [--json] [--strict]

Checks the configuration and the machine the gateway will run on: the configuration
file, Node, the metrics listener (warns beyond loopback), the serial ports (present,
accessible, not locked by another process), each fenced device (its identity block says
the fenced profile with the configured setpoints; read only), the broker (reachable with
the configured TLS and credentials, request topics allowed, no other gateway with this
gatewayId), the journal directory (writable, fsync speed) and file (loads, no committed
history lost), and the clock. Changes nothing.
Run it as the service user, with the daemon stopped to also check the serial ports.

options:
  -c, --config FILE   the daemon's YAML configuration
      --json          print {"ok", "findings": [{check, status, message, fix?}]} for scripts
      --strict        warnings fail too (exit 2)
  -h, --help

examples:
  sudo -u fencegate fencegate doctor --config /etc/fencegate/gateway.yaml
  fencegate doctor -c config/pi-rs485.yaml --json | jq '.findings[] | select(.status == "fail")'

exit codes: 0 no problems, 1 problems found, 2 warnings only (with --strict), 64 usage`;

const LABEL: Record<Status, string> = { ok: "ok", info: "info", warn: "WARN", fail: "FAIL" };

export async function main(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseCommandLine(
      argv,
      {
        config: { type: "string", short: "c" },
        json: { type: "boolean" },
        strict: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
      false,
    ));
  } catch (err) {
    console.error(`fencegate doctor: ${(err as Error).message}\n${HELP.split("\n")[0]}  (\`fencegate doctor --help\` for the options)`);
    return EXIT.USAGE;
  }
  if (values.help) {
    console.log(HELP);
    return EXIT.OK;
  }
  if (!values.config) {
    console.error(`fencegate doctor: --config is required\n\n${HELP}`);
    return EXIT.USAGE;
  }
  const findings = await runDoctor(values.config);
  const failures = findings.filter((f) => f.status === "fail").length;
  const warnings = findings.filter((f) => f.status === "warn").length;
  const code = failures > 0 ? EXIT.DOCTOR_PROBLEMS : warnings > 0 && values.strict ? EXIT.DOCTOR_WARNINGS : EXIT.OK;
  if (values.json) console.log(JSON.stringify({ ok: code === EXIT.OK, findings }, null, 2));
  else console.log(render(values.config, findings, failures, warnings));
  return code;
}

function render(config: string, findings: readonly Finding[], failures: number, warnings: number): string {
  const width = Math.max(...findings.map((f) => f.check.length));
  const lines = [`fencegate doctor: ${config}`, ""];
  for (const f of findings) {
    lines.push(`${LABEL[f.status].padEnd(4)}  ${f.check.padEnd(width)}  ${f.message}`);
    if (f.fix) lines.push(`${" ".repeat(6 + width + 2)}fix: ${f.fix}`);
  }
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  lines.push(
    "",
    failures === 0 && warnings === 0 ? "All checks passed." : `${plural(failures, "problem")}, ${plural(warnings, "warning")}.`,
  );
  return lines.join("\n");
}
