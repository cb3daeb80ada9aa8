/**
 * `fencegate doctor` against good and broken setups: a pty pair stands in for the RS-485
 * adapter, a real Mosquitto with a password file for the broker, temp directories for the
 * journal. Each broken setup must produce its own finding with a fix, and a non-zero exit.
 */
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { SerialPort } from "serialport";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { checkNode, runDoctor, satisfies, type Finding } from "../../../src/doctor/checks.ts";
import { gatewayConfig, valve } from "../../support/daemon.ts";
import { MisbehavingSlave, fencedIdentity } from "../../support/misbehaving-slave.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { freePort } from "../../support/ports.ts";
import { FENCEGATE_BIN, nobodyCanRead, runFencegateSync, runToolOrThrow } from "../../support/processes.ts";
import { Teardown } from "../../support/stack.ts";

const teardown = new Teardown();
let dir: string;
let pty: PtyPair;
let broker: Broker;

beforeAll(async () => {
  dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-doctor-test-")), (d) => rmSync(d, { recursive: true, force: true }));
  chmodSync(dir, 0o755); // readable by the unprivileged user some cases run as
  const passwords = join(dir, "passwords");
  runToolOrThrow("mosquitto_passwd", ["-b", "-c", passwords, "gw-test", "right-password"]);
  chmodSync(passwords, 0o644);
  broker = teardown.add(await startMosquitto(`allow_anonymous false\npassword_file ${passwords}`), (b) => b.stop());
  pty = teardown.add(await createPtyPair(), (p) => p.close());
  chmodSync(dirname(pty.master), 0o755);
});
afterAll(() => teardown.run());

let configs = 0;
/** A configuration file in its own directory; `edit` changes the good one. */
function writeConfig(edit: (c: Record<string, any>) => void = () => {}): string {
  const d = join(dir, `case-${++configs}`);
  mkdirSync(d, { mode: 0o755 });
  const c = gatewayConfig({
    brokerUrl: broker.url,
    journalPath: join(d, "state", "journal.db"),
    buses: { rs485: { type: "rtu", path: pty.master, baudRate: 19200 } },
    actuators: [valve("valve-1", "rs485", 1)],
    mqtt: { username: "gw-test", password: "right-password", allowCleartextCredentials: true },
  });
  mkdirSync(join(d, "state"), { mode: 0o755 });
  edit(c);
  const file = join(d, "gateway.yaml");
  writeFileSync(file, stringify(c), { mode: 0o644 });
  return file;
}

function only(findings: Finding[], check: string): Finding[] {
  return findings.filter((f) => f.check === check);
}

function failures(findings: Finding[]): Finding[] {
  return findings.filter((f) => f.status === "fail");
}

/** The CLI as a separate process; as `uid` when given (root only). */
function doctorCli(args: string[], uid?: number) {
  return runFencegateSync(["doctor", ...args], { timeoutMs: 60_000, ...(uid === undefined ? {} : { uid, gid: uid }) });
}

describe("a good setup", () => {
  it("passes every check, exit 0, and says so in JSON", () => {
    const run = doctorCli(["--config", writeConfig(), "--json"]);
    expect(run.stderr).toBe("");
    const report = JSON.parse(run.stdout) as { ok: boolean; findings: Finding[] };
    expect(failures(report.findings)).toEqual([]);
    expect({ code: run.code, ok: report.ok }).toEqual({ code: 0, ok: true });
    const statuses = Object.fromEntries(report.findings.map((f) => [f.check, f.status]));
    // Node 20 passes with a warning (end of life); 22 and 24 pass.
    expect(statuses).toMatchObject({
      node: process.versions.node.startsWith("20.") ? "warn" : "ok",
      config: "ok",
      "serial rs485": "ok",
      broker: "ok",
      "broker acl": "ok",
      clock: "ok",
    });
    expect(["ok", "warn"]).toContain(statuses["journal dir"]); // warn: a slow disk on this machine
    const dirFinding = only(report.findings, "journal dir")[0]!;
    expect(dirFinding.details).toMatchObject({ fsyncMedianMs: expect.any(Number), fsyncMaxMs: expect.any(Number) });
  });

  it("prints one line per check and a summary for people", () => {
    const run = doctorCli(["--config", writeConfig()]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^ok {4}serial rs485 +.+ opens and locks at 19200 baud/m);
    expect(run.stdout).toMatch(/0 problems, \d warnings?\.|All checks passed\./);
  });

  it("checks an existing journal on a copy and leaves the original untouched", async () => {
    const config = writeConfig();
    const journalPath = join(config, "..", "state", "journal.db");
    const journal = openSqliteJournal({ path: journalPath, recentLimit: 8 });
    journal.load();
    journal.close();
    const before = { bytes: readFileSync(journalPath), mtimeMs: statSync(journalPath).mtimeMs };
    const findings = await runDoctor(config);
    expect(only(findings, "journal")).toEqual([
      expect.objectContaining({ status: "ok", message: expect.stringContaining("loads: 0 actuator(s) on record") }),
    ]);
    expect({ bytes: readFileSync(journalPath), mtimeMs: statSync(journalPath).mtimeMs }).toEqual(before);
  });
});

describe("a broken setup", () => {
  /** The journal of `config` as a SIGKILL leaves it, then `lose` removes some of it. */
  function crashedJournal(config: string, lose: readonly string[]): string {
    const journalPath = join(config, "..", "state", "journal.db");
    const live = openSqliteJournal({ path: `${journalPath}.live`, recentLimit: 8 });
    live.load();
    for (let token = 1; token <= 5; token++) live.commit([{ actuator: "valve-1", record: { type: "granted", holder: "line-a", token } }]);
    for (const suffix of ["", "-wal", "-mark"])
      if (!lose.includes(suffix)) copyFileSync(`${journalPath}.live${suffix}`, journalPath + suffix);
    live.close();
    return journalPath;
  }

  it("a journal whose -wal was lost after a crash: lost history, and the command that recovers", async () => {
    const config = writeConfig();
    crashedJournal(config, ["-wal"]);
    expect(only(await runDoctor(config), "journal")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: expect.stringMatching(/state\/journal\.db-wal is missing, but .*journal\.db-mark says the journal was open/),
        fix: expect.stringContaining("fencegate journal recover --config"),
      }),
    ]);
  });

  it("a journal whose database file is gone, its mark kept", async () => {
    const config = writeConfig();
    crashedJournal(config, ["", "-wal"]);
    expect(only(await runDoctor(config), "journal")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: expect.stringMatching(/journal\.db is missing, but .*journal\.db-mark says a journal was kept here/),
        fix: expect.stringContaining("fencegate journal recover"),
      }),
    ]);
  });

  it("two buses on one Modbus TCP endpoint, an actuator on unit 1 of each: refused, both named", async () => {
    const findings = await runDoctor(
      writeConfig((c) => {
        c.buses = { a: { type: "tcp", host: "127.0.0.1", port: 15121 }, b: { type: "tcp", host: "127.0.0.1", port: 15121 } };
        c.actuators = [valve("valve-1", "a", 1, "plain"), valve("valve-2", "b", 1, "plain")];
      }),
    );
    expect(failures(findings)).toEqual([
      expect.objectContaining({
        check: "config",
        message: expect.stringMatching(
          /^actuators\[1\]\.unit \(line \d+\): Unit 1 at 127\.0\.0\.1:15121 is already actuators\[0\] \(bus "a"\): buses "a" and "b" reach the same device there/,
        ),
      }),
    ]);
  });

  it("two buses whose hosts are names for one address, an actuator on unit 1 of each", async () => {
    const findings = await runDoctor(
      writeConfig((c) => {
        c.buses = { a: { type: "tcp", host: "localhost", port: 15121 }, b: { type: "tcp", host: "127.0.0.1", port: 15121 } };
        c.actuators = [valve("valve-1", "a", 1, "plain"), valve("valve-2", "b", 1, "plain")];
      }),
    );
    expect(only(findings, "buses")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: expect.stringMatching(
          /^actuators\[1\] \(valve-2, bus "b"\) and actuators\[0\] \(valve-1, bus "a"\) are both unit 1 at 127\.0\.0\.1:15121/,
        ),
      }),
    ]);
  });

  it("a bad configuration: every problem with its line, and no machine checks", () => {
    const run = doctorCli([
      "--config",
      writeConfig((c) => {
        c.buses.rs485.baudRate = 19201;
        c.actuators[0].bus = "rs458";
      }),
    ]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/FAIL {2}config +buses\.rs485\.baudRate \(line \d+\): Must be one of the standard rates/);
    expect(run.stdout).toMatch(/actuators\[0\]\.bus \(line \d+\): No bus named "rs458" under buses \(did you mean "rs485"\?\)/);
    expect(run.stdout).not.toMatch(/serial|broker|journal/);
  });

  it("a missing serial device", async () => {
    const findings = await runDoctor(writeConfig((c) => (c.buses.rs485.path = "/dev/ttyUSB97")));
    expect(only(findings, "serial rs485")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: "/dev/ttyUSB97 does not exist (ENOENT).",
        fix: expect.stringContaining("Plug in the RS-485 adapter"),
      }),
    ]);
  });

  it("a numbered /dev/ttyUSBn path: advice to use /dev/serial/by-id", async () => {
    // A char device under a ttyUSB-like name is not available here; the advice is keyed on the name.
    const findings = await runDoctor(writeConfig((c) => (c.buses.rs485.path = "/dev/ttyUSB0")));
    const serial = only(findings, "serial rs485");
    expect(serial[0]!.status).toBe("fail");
    expect(serial[0]!.message).toMatch(/^\/dev\/ttyUSB0 does not exist|numbered in plug-in order/);
  });

  it("a port another process holds open and locked", async () => {
    const holder = new SerialPort({ path: pty.master, baudRate: 19200, lock: true, autoOpen: false });
    await new Promise<void>((resolve, reject) => holder.open((err) => (err ? reject(err) : resolve())));
    try {
      const run = doctorCli(["--config", writeConfig(), "--json"]);
      expect(run.code).toBe(1);
      const serial = only((JSON.parse(run.stdout) as { findings: Finding[] }).findings, "serial rs485");
      expect(serial).toHaveLength(1);
      expect(serial[0]!.status).toBe("fail");
      expect(serial[0]!.message).toContain(`is locked by another process (pid ${process.pid}:`);
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it("a broker nobody listens for", async () => {
    const port = await freePort();
    const findings = await runDoctor(writeConfig((c) => (c.mqtt.url = `mqtt://127.0.0.1:${port}`)));
    expect(only(findings, "broker")).toEqual([
      expect.objectContaining({ status: "fail", message: `Nothing accepts connections at 127.0.0.1:${port} (connection refused).` }),
    ]);
  });

  it("a broker host name that does not resolve", async () => {
    const findings = await runDoctor(writeConfig((c) => (c.mqtt.url = "mqtt://broker.fencegate.invalid:1883")));
    expect(only(findings, "broker")[0]!.message).toMatch(
      /^The broker's host name broker\.fencegate\.invalid does not resolve \((ENOTFOUND|EAI_AGAIN)\)\.$/,
    );
  });

  it("the wrong password, against Mosquitto's password file", async () => {
    const findings = await runDoctor(writeConfig((c) => (c.mqtt.password = "wrong-password")));
    expect(only(findings, "broker")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: expect.stringMatching(
          /^The broker refused user gw-test: a wrong password, an unknown user or a user it does not allow \(MQTT reason (134|135)\)\.$/,
        ),
        fix: expect.stringContaining("mosquitto_passwd"),
      }),
    ]);
  });

  it("no credentials where the broker wants them", async () => {
    const findings = await runDoctor(writeConfig((c) => (c.mqtt = { url: broker.url })));
    expect(only(findings, "broker")[0]).toMatchObject({
      status: "fail",
      message: expect.stringMatching(/^The broker wants credentials and none were given \(MQTT reason 135\)\.$/),
    });
  });

  it("a damaged journal file", async () => {
    const config = writeConfig();
    writeFileSync(
      join(config, "..", "state", "journal.db"),
      "not a database, just text that is long enough to be read as a header ".repeat(20),
    );
    const findings = await runDoctor(config);
    expect(only(findings, "journal")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: expect.stringContaining("JOURNAL_UNREADABLE"),
        fix: expect.stringMatching(/restore the journal from a backup .* then run `fencegate journal recover/),
      }),
    ]);
  });

  // Root writes anywhere: as root, this case runs the doctor as nobody (uid 65534), which
  // needs to be able to read the checkout (not so under /root, for one).
  const asRoot = process.getuid?.() === 0;
  const nobodyCanRun = !asRoot || nobodyCanRead(FENCEGATE_BIN);
  it.skipIf(!nobodyCanRun)("a journal directory the service user cannot write", () => {
    const config = writeConfig();
    const state = join(config, "..", "state");
    chmodSync(state, 0o555);
    const run = doctorCli(["--config", config, "--json"], asRoot ? 65534 : undefined);
    expect(run.code).toBe(1);
    const findings = (JSON.parse(run.stdout) as { findings: Finding[] }).findings;
    expect(only(findings, "journal dir")).toEqual([
      expect.objectContaining({
        status: "fail",
        message: expect.stringMatching(/state is not writable by \S+: the journal and its -wal file live there\.$/),
      }),
    ]);
    if (asRoot) {
      // The pty belongs to root with mode 0620: nobody may not use it, and doctor says so.
      expect(only(findings, "serial rs485")[0]).toMatchObject({
        status: "fail",
        message: expect.stringContaining("is not readable and writable by nobody"),
        fix: expect.stringMatching(/usermod -aG \w+ fencegate|udev rule/),
      });
    }
  });
});

describe("a Modbus TCP bus", () => {
  it("is reachable when something accepts connections, and a failure when nothing does", async () => {
    const server = net.createServer((s) => s.destroy()).listen(0, "127.0.0.1");
    await once(server, "listening");
    const closed = await freePort();
    try {
      const findings = await runDoctor(
        writeConfig((c) => {
          c.buses = {
            plc: { type: "tcp", host: "127.0.0.1", port: (server.address() as net.AddressInfo).port },
            dead: { type: "tcp", host: "127.0.0.1", port: closed },
          };
          c.actuators = [valve("valve-1", "plc", 1), valve("valve-2", "dead", 1)];
        }),
      );
      expect(only(findings, "modbus-tcp plc")[0]).toMatchObject({ status: "ok" });
      expect(only(findings, "modbus-tcp dead")[0]).toMatchObject({
        status: "fail",
        message: `Cannot connect to 127.0.0.1:${closed}: ECONNREFUSED.`,
      });
    } finally {
      server.close();
    }
  });
});

describe("fenced devices", () => {
  it("a fenced actuator pointed at a generic Modbus TCP device: a failure that says what the device reported, after reads only", async () => {
    const slave = await MisbehavingSlave.tcp();
    try {
      const findings = await runDoctor(
        writeConfig((c) => {
          c.buses = { plc: { type: "tcp", host: "127.0.0.1", port: slave.address!.port } };
          c.actuators = [valve("valve-1", "plc", 1)];
        }),
      );
      expect(only(findings, "device valve-1")).toEqual([
        expect.objectContaining({
          status: "fail",
          message: expect.stringMatching(/register 0 reads 0x0000, not the fencegate magic 0x4647/),
          fix: expect.stringMatching(/profile: plain/),
        }),
      ]);
      expect(slave.requests.filter((r) => r.fc !== 3)).toEqual([]);
    } finally {
      await slave.close();
    }
  });

  it("a fenced device on the RTU line that identifies right: ok, with its own fence", async () => {
    const slave = await MisbehavingSlave.rtu(pty.device);
    try {
      slave.set(0, fencedIdentity(1));
      slave.set(0x10, [0, 0, 0, 7]);
      const findings = await runDoctor(writeConfig());
      expect(only(findings, "device valve-1")).toEqual([
        expect.objectContaining({ status: "ok", message: expect.stringMatching(/fence is at token 7/) }),
      ]);
    } finally {
      await slave.close();
    }
  });

  it("a fenced device that does not answer: a warning, not a failure", async () => {
    const findings = await runDoctor(writeConfig());
    expect(only(findings, "device valve-1")).toEqual([
      expect.objectContaining({ status: "warn", message: expect.stringMatching(/no usable answer/) }),
    ]);
  });
});

describe("the metrics listener", () => {
  it("beyond loopback, chosen explicitly: a warning that it answers anyone, without authentication", async () => {
    // The status page needs credentials beyond loopback: off, as the premise is "no authentication".
    const findings = await runDoctor(
      writeConfig(
        (c) => (c.metrics = { enabled: true, host: "0.0.0.0", port: 9464, allowNonLoopback: true, statusPage: { enabled: false } }),
      ),
    );
    expect(only(findings, "metrics")).toEqual([
      expect.objectContaining({ status: "warn", message: expect.stringMatching(/0\.0\.0\.0:9464.*without authentication/) }),
    ]);
  });

  it("beyond loopback with credentials: says they travel in clear over plain HTTP", async () => {
    const findings = await runDoctor(
      writeConfig((c) => (c.metrics = { enabled: true, host: "0.0.0.0", port: 9464, auth: { token: "0123456789abcdef-token" } })),
    );
    expect(only(findings, "metrics")).toEqual([
      expect.objectContaining({
        status: "info",
        message: expect.stringMatching(/ask for the credentials of metrics.auth, which travel in clear/),
      }),
    ]);
  });

  it("on loopback: nothing to say", async () => {
    const findings = await runDoctor(writeConfig((c) => (c.metrics = { enabled: true, host: "127.0.0.1", port: 9464 })));
    expect(only(findings, "metrics")).toEqual([]);
  });
});

describe("the Node version check", () => {
  it("reads package.json's engines range", () => {
    expect(satisfies("20.11.0", ">=20.11 <23")).toBe(true);
    expect(satisfies("22.9.1", ">=20.11 <23")).toBe(true);
    expect(satisfies("20.10.9", ">=20.11 <23")).toBe(false);
    expect(satisfies("23.0.0", ">=20.11 <23")).toBe(false);
    expect(satisfies("18.19.0", ">=20.11 <23")).toBe(false);
  });

  it("reads alternatives and caret ranges", () => {
    const supported = "^20.19.0 || ^22.12.0 || ^24.0.0";
    expect(["20.19.0", "20.20.2", "22.12.0", "22.23.5", "24.0.0", "24.22.3"].filter((v) => satisfies(v, supported))).toHaveLength(6);
    expect(["20.11.0", "21.7.3", "22.11.0", "23.11.1", "25.0.0", "26.1.0", "18.20.4"].filter((v) => satisfies(v, supported))).toEqual([]);
  });

  it("passes Node 22 and 24, warns on Node 20 (end of life), fails outside the supported set", () => {
    expect(checkNode("24.22.3")).toMatchObject({ status: "ok" });
    expect(checkNode("22.23.5")).toMatchObject({ status: "ok" });
    expect(checkNode("20.20.2")).toMatchObject({ status: "warn", message: expect.stringContaining("end of life") });
    expect(checkNode("23.11.1")).toMatchObject({ status: "fail", fix: expect.stringContaining("Node 24") });
    expect(checkNode("18.20.4")).toMatchObject({ status: "fail" });
  });
});
