/**
 * `fencegate doctor`'s checks: the configuration and the machine it will run on. Each
 * check returns findings (ok, info, warn, fail) with one sentence of what is wrong and one
 * of how to fix it. Nothing here changes anything: the journal is checked on a copy, the
 * serial port is opened and closed, the fenced devices are only read, the fsync probe
 * removes its file, the broker session is clean and uses its own client id.
 */
import { execFile } from "node:child_process";
import dns from "node:dns/promises";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { MqttClient, type ISubscriptionGrant } from "mqtt";
import { pino } from "pino";
import { SerialPort } from "serialport";
import { differencesSentence, differingMembers, leaderKeyOf, leaderOf } from "../adapters/etcd/member.ts";
import { etcdClientFor, publishedConfig } from "../config/etcd.ts";
import { leaderHangRoomMs, leadershipConfig } from "../core/leadership.ts";
import { markPath } from "../adapters/journal/mark.ts";
import { openSqliteJournal, writerLockHeld } from "../adapters/journal/sqlite.ts";
import { NativeModuleError } from "../adapters/journal/native.ts";
import { ModbusBus, OFFLINE_AFTER_FAILURES } from "../adapters/modbus/bus.ts";
import { busLink } from "../config/modbus-link.ts";
import { ModbusDevice } from "../adapters/modbus/device.ts";
import { streamBuilder } from "../adapters/mqtt/link.ts";
import { type GatewayIdentity, requestSubscriptions } from "../../packages/protocol/src/index.ts";
import { ActuatorConflictError, actuatorConflictOf, identityOf, probeGateways, type ProbeResult } from "../adapters/mqtt/presence.ts";
import { ConfigError } from "../config/problems.ts";
import { loadConfigFile } from "../config/load.ts";
import {
  isLoopbackHost,
  quietAfterTimeoutMs,
  type GatewayConfig,
  type GroupConfig,
  type MqttConfig,
  type RtuBusConfig,
  type TcpBusConfig,
} from "../config/schema.ts";
import { PACKAGE_ROOT } from "../package-root.ts";
import { DeviceMismatchError, JournalError } from "../shell/ports.ts";

export type Status = "ok" | "info" | "warn" | "fail";

export interface Finding {
  /** What was checked: `config`, `serial rs485`, `broker`, `journal dir`, ... */
  readonly check: string;
  readonly status: Status;
  /** One sentence: what was found. */
  readonly message: string;
  /** One sentence: what to do about it (warn and fail). */
  readonly fix?: string;
  readonly details?: Record<string, unknown>;
}

export interface DoctorOptions {
  /** How long the broker may take to accept the connection (default 8000 ms). */
  readonly brokerTimeoutMs?: number;
  /** Median fsync above this is reported as slow storage (default 20 ms). */
  readonly slowFsyncMs?: number;
}

/** Every check, in the order a person fixes things: the file, then the machine. */
export async function runDoctor(configPath: string, options: DoctorOptions = {}): Promise<Finding[]> {
  const findings: Finding[] = [checkNode(), ...checkUser(), ...(await checkClock())];
  let config: GatewayConfig;
  try {
    config = loadConfigFile(configPath);
    findings.push({
      check: "config",
      status: "ok",
      message: `${path.resolve(configPath)} is valid: ${config.actuators.length} actuator(s) on ${Object.keys(config.buses).length} bus(es).`,
    });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    for (const p of err.problems) {
      const where = `${p.path === "" ? "(file)" : p.path}${p.line === undefined ? "" : ` (line ${p.line})`}`;
      findings.push({
        check: "config",
        status: "fail",
        message: `${where}: ${p.message}`,
        fix: `Edit ${configPath} and run doctor again; the machine checks need a valid configuration.`,
      });
    }
    return findings;
  }
  findings.push(...checkMetrics(config));
  for (const [name, bus] of Object.entries(config.buses)) {
    findings.push(...(bus.type === "rtu" ? await checkSerial(name, bus) : [await checkModbusTcp(name, bus)]));
  }
  findings.push(...(await checkSharedTcpDevices(config)));
  findings.push(...(await checkFencedDevices(config)));
  findings.push(...(await checkBroker(config.mqtt, options.brokerTimeoutMs ?? 8000)));
  findings.push(...(await checkGatewayId(config)));
  if (config.group !== undefined) findings.push(await checkGroup(config.group, config));
  findings.push(...checkJournalDir(config.journal.path, options.slowFsyncMs ?? 20));
  findings.push(...checkJournalFile(config));
  return findings;
}

// ---------------------------------------------------------------------------------------
// Node, user, clock

const PACKAGE_JSON = path.join(PACKAGE_ROOT, "package.json");

/** Node majors whose support has ended but that still work: a warning, not a failure. */
const END_OF_LIFE_NODE: Readonly<Record<number, string>> = { 20: "2026-04-30" };
const INSTALL_NODE = "Install Node 24 LTS (64-bit Raspberry Pi OS) or Node 22 LTS (32-bit): docs/deploy.md, section 1.";

export function checkNode(version = process.versions.node): Finding {
  const range = (JSON.parse(fs.readFileSync(PACKAGE_JSON, "utf8")) as { engines?: { node?: string } }).engines?.node ?? "";
  if (!satisfies(version, range))
    return { check: "node", status: "fail", message: `Node ${version} is outside the supported set "${range}".`, fix: INSTALL_NODE };
  const endedOn = END_OF_LIFE_NODE[parts(version)[0]!];
  return endedOn
    ? {
        check: "node",
        status: "warn",
        message: `Node ${version} works, but its line reached end of life on ${endedOn}: no more security fixes.`,
        fix: INSTALL_NODE,
      }
    : { check: "node", status: "ok", message: `Node ${version} is supported ("${range}").` };
}

/**
 * `range`: alternatives separated by `||`, each space-separated comparators `>=a.b.c`, `>a`,
 * `<=a.b`, `<a`, `=a` or caret ranges `^a.b.c` (what package.json's engines uses here).
 */
export function satisfies(version: string, range: string): boolean {
  const v = parts(version);
  return range.split("||").some((alternative) => {
    const comparators = alternative.split(/\s+/).filter(Boolean);
    return (
      comparators.length > 0 &&
      comparators.every((comparator) => {
        const m = /^(>=|<=|>|<|=|\^)?v?(\d+(?:\.\d+){0,2})$/.exec(comparator);
        if (!m) return false;
        const bound = parts(m[2]!);
        const c = compare(v, bound);
        switch (m[1]) {
          case ">=":
            return c >= 0;
          case "<=":
            return c <= 0;
          case ">":
            return c > 0;
          case "<":
            return c < 0;
          case "^":
            return c >= 0 && v[0] === bound[0];
          default:
            return c === 0;
        }
      })
    );
  });
}

function parts(v: string): number[] {
  const p = v.replace(/^v/, "").split("-")[0]!.split(".").map(Number);
  return [p[0] ?? 0, p[1] ?? 0, p[2] ?? 0];
}

function compare(a: number[], b: number[]): number {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return 0;
}

function checkUser(): Finding[] {
  const user = os.userInfo();
  if (user.uid !== 0) return [{ check: "user", status: "info", message: `Checking as ${user.username} (uid ${user.uid}).` }];
  return [
    {
      check: "user",
      status: "warn",
      message: "Running as root: file and device permissions are not checked as the service will see them.",
      fix: "Run the doctor as the service user: sudo -u fencegate fencegate doctor --config /etc/fencegate/gateway.yaml",
    },
  ];
}

/** Informative: decisions use the monotonic clock only; wall time only stamps logs and states. */
async function checkClock(): Promise<Finding[]> {
  const findings: Finding[] = [];
  let monotonic = typeof process.hrtime.bigint === "function";
  let previous = performance.now();
  for (let i = 0; i < 10_000 && monotonic; i++) {
    const now = performance.now();
    if (now < previous) monotonic = false;
    previous = now;
  }
  const wallStepMs = Date.now() - (performance.timeOrigin + performance.now());
  findings.push(
    monotonic
      ? {
          check: "clock",
          status: "ok",
          message: `The monotonic clock (performance.now, process.hrtime) works; leases and deadlines use only it. Wall clock ${new Date().toISOString()}, ${Math.round(wallStepMs)} ms off the monotonic clock since start.`,
        }
      : {
          check: "clock",
          status: "fail",
          message: "performance.now() went backwards: this Node cannot time leases.",
          fix: "Use an official Node build (docs/deploy.md, section 1).",
        },
  );
  const ntp = await run("timedatectl", ["show", "--property=NTP", "--property=NTPSynchronized", "--property=Timezone"]);
  if (ntp.ok) {
    const props = Object.fromEntries(
      ntp.stdout
        .trim()
        .split("\n")
        .map((l) => l.split("=", 2) as [string, string]),
    );
    const synced = props.NTPSynchronized === "yes";
    findings.push({
      check: "clock ntp",
      status: "info",
      message: synced
        ? `NTP synchronized (timezone ${props.Timezone ?? "?"}); only log and state timestamps depend on it.`
        : `NTP not synchronized (NTP=${props.NTP ?? "?"}): a Pi has no battery clock, so log and state timestamps are wrong until it syncs; no decision depends on them.`,
      details: props,
    });
  } else {
    findings.push({
      check: "clock ntp",
      status: "info",
      message: `NTP state unknown (timedatectl: ${ntp.error}); no decision depends on the wall clock.`,
    });
  }
  return findings;
}

function run(command: string, args: string[], timeoutMs = 3000): Promise<{ ok: true; stdout: string } | { ok: false; error: string }> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: timeoutMs, encoding: "utf8" }, (err, stdout, stderr) => {
      if (err) resolve({ ok: false, error: (stderr.trim() || err.message).split("\n")[0]! });
      else resolve({ ok: true, stdout });
    });
  });
}

// ---------------------------------------------------------------------------------------
// Serial ports

async function checkSerial(bus: string, config: RtuBusConfig): Promise<Finding[]> {
  const check = `serial ${bus}`;
  const file = config.path;
  const findings: Finding[] = [];
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch (err) {
    return serialPathMissing(check, file, err);
  }
  if (!stat.isCharacterDevice()) {
    return [
      {
        check,
        status: "fail",
        message: `${file} is not a character device (a serial port); it is a ${stat.isDirectory() ? "directory" : "regular file"}.`,
        fix: "Set buses.<name>.path to the adapter's device, e.g. /dev/serial/by-id/usb-FTDI_...-if00-port0.",
      },
    ];
  }
  const real = fs.realpathSync(file);
  if (/^\/dev\/tty(USB|ACM)\d+$/.test(file)) {
    const ids = byIdLinks()
      .filter((l) => l.target === real)
      .map((l) => l.link);
    findings.push({
      check,
      status: "warn",
      message: `${file} is numbered in plug-in order: after a re-plug or reboot another adapter may get this name.`,
      fix: ids.length > 0 ? `Use ${ids[0]} instead.` : "Use the adapter's /dev/serial/by-id/... name instead (ls -l /dev/serial/by-id/).",
    });
  }
  try {
    fs.accessSync(file, fs.constants.R_OK | fs.constants.W_OK);
  } catch {
    const group = groupName(stat.gid);
    findings.push({
      check,
      status: "fail",
      message: `${file} is not readable and writable by ${os.userInfo().username} (mode ${(stat.mode & 0o777).toString(8)}, group ${group}).`,
      fix:
        stat.gid === 0
          ? 'The device belongs to group root: give it group dialout with a udev rule (SUBSYSTEM=="tty", ..., GROUP="dialout", MODE="0660"; docs/deploy.md).'
          : `Add the service user to group ${group}: usermod -aG ${group} fencegate (the unit sets SupplementaryGroups=dialout; add ${group} there too if it is not dialout).`,
    });
    return findings;
  }
  findings.push(await serialOpenFinding(check, config, stat, real));
  findings.push(...latencyTimer(check, real));
  return findings;
}

/** The serial port's path cannot be stat()ed: why, and what to do. */
async function serialPathMissing(check: string, file: string, err: unknown): Promise<Finding[]> {
  if (errorCode(err) === "EACCES") {
    return [
      {
        check,
        status: "fail",
        message: `${file} cannot be reached by ${os.userInfo().username}: a directory on its path is not searchable (EACCES).`,
        fix: "Use the device's own path (/dev/serial/by-id/...), or fix the directory's permissions.",
      },
    ];
  }
  const present = await presentPorts();
  return [
    {
      check,
      status: "fail",
      message: `${file} does not exist (${errorCode(err)}).`,
      fix: `Plug in the RS-485 adapter and check \`dmesg | tail\`; ports present now: ${present.length > 0 ? present.join(", ") : "none"}.`,
    },
  ];
}

/** Whether the port opens and locks with the bus's settings, as the daemon would open it. */
async function serialOpenFinding(check: string, config: RtuBusConfig, stat: fs.Stats, real: string): Promise<Finding> {
  const file = config.path;
  const holders = lockHolders(stat);
  const opened = await tryOpen(config);
  if (opened === null) {
    return {
      check,
      status: "ok",
      message: `${file}${real === file ? "" : ` (${real})`} opens and locks at ${config.baudRate} baud, ${config.parity} parity, ${config.stopBits} stop bit(s).`,
    };
  }
  if (/lock/i.test(opened)) {
    return {
      check,
      status: "fail",
      message: `${file} is locked by another process${holders.length > 0 ? ` (${holders.map(describePid).join(", ")})` : ""}: two masters on one line corrupt each other's frames.`,
      fix: "Stop the other program (if it is fencegate itself, this is expected while it runs: `systemctl stop fencegate` to check the port).",
    };
  }
  return {
    check,
    status: "fail",
    message: `${file} cannot be opened as a serial port: ${opened}.`,
    fix: "Check the adapter (dmesg) and the baud rate and framing settings of the bus.",
  };
}

/** null when the port opened (and was closed again), else the error. */
function tryOpen(config: RtuBusConfig): Promise<string | null> {
  return new Promise((resolve) => {
    const port = new SerialPort({
      path: config.path,
      baudRate: config.baudRate,
      parity: config.parity,
      stopBits: config.stopBits,
      dataBits: 8,
      lock: true,
      autoOpen: false,
    });
    port.open((err) => {
      if (err) return resolve(err.message.replace(/^Error:?\s*/, ""));
      port.close(() => resolve(null));
    });
  });
}

/** An FTDI adapter holds received bytes up to latency_timer ms (default 16) before the USB transfer. */
function latencyTimer(check: string, real: string): Finding[] {
  const file = `/sys/bus/usb-serial/devices/${path.basename(real)}/latency_timer`;
  let ms: number;
  try {
    ms = Number(fs.readFileSync(file, "utf8").trim());
  } catch {
    return [];
  }
  if (ms <= 1) return [{ check, status: "ok", message: `USB latency_timer is ${ms} ms.` }];
  return [
    {
      check,
      status: "warn",
      message: `USB latency_timer is ${ms} ms: every reply from a device waits up to that long in the adapter, on top of the Modbus turnaround.`,
      fix: `echo 1 > ${file} (or a udev rule; see docs/deploy.md).`,
    },
  ];
}

async function presentPorts(): Promise<string[]> {
  const byId = byIdLinks().map((l) => l.link);
  if (byId.length > 0) return byId;
  try {
    return (await SerialPort.list()).map((p) => p.path);
  } catch {
    // SerialPort.list() needs udevadm, which containers and minimal images lack.
    return fs
      .readdirSync("/dev")
      .filter((n) => /^tty(USB|ACM|AMA)\d+$/.test(n))
      .map((n) => `/dev/${n}`);
  }
}

function byIdLinks(): { link: string; target: string }[] {
  const dir = "/dev/serial/by-id";
  try {
    return fs.readdirSync(dir).map((n) => ({ link: path.join(dir, n), target: fs.realpathSync(path.join(dir, n)) }));
  } catch {
    return [];
  }
}

function groupName(gid: number): string {
  try {
    const line = fs
      .readFileSync("/etc/group", "utf8")
      .split("\n")
      .find((l) => l.split(":")[2] === String(gid));
    if (line) return line.split(":")[0]!;
  } catch {
    // fall through
  }
  return String(gid);
}

/** Pids holding a POSIX or flock lock on the file, from /proc/locks (Linux). */
function lockHolders(stat: fs.Stats): number[] {
  let text: string;
  try {
    text = fs.readFileSync("/proc/locks", "utf8");
  } catch {
    return [];
  }
  const major = (stat.dev >> 8) & 0xfff;
  const minor = (stat.dev & 0xff) | ((stat.dev >> 12) & 0xfff00);
  const id = `${major.toString(16).padStart(2, "0")}:${minor.toString(16).padStart(2, "0")}:${stat.ino}`;
  const pids = new Set<number>();
  for (const line of text.split("\n")) {
    // "1: POSIX  ADVISORY  WRITE 3771 fe:00:1466553 0 EOF"; a waiter has "->" after the number.
    const f = line.trim().split(/\s+/);
    const at = f[1] === "->" ? 1 : 0;
    const pid = Number(f[4 + at]);
    const where = f[5 + at];
    if (where === id && pid !== process.pid && Number.isInteger(pid)) pids.add(pid);
  }
  return [...pids];
}

function describePid(pid: number): string {
  try {
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
    return `pid ${pid}: ${cmd.length > 80 ? `${cmd.slice(0, 80)}…` : cmd}`;
  } catch {
    return `pid ${pid}`;
  }
}

function errorCode(err: unknown): string {
  return String((err as NodeJS.ErrnoException).code ?? (err as Error).message);
}

/** A Modbus TCP device or gateway: accepts a TCP connection (Modbus itself is not spoken). */
function checkModbusTcp(bus: string, config: TcpBusConfig): Promise<Finding> {
  const check = `modbus-tcp ${bus}`;
  const where = `${config.host}:${config.port}`;
  return new Promise((resolve) => {
    const socket = net.connect({ host: config.host, port: config.port, timeout: config.timeoutMs * 3 });
    const done = (finding: Finding) => {
      socket.destroy();
      resolve(finding);
    };
    socket.once("connect", () => done({ check, status: "ok", message: `${where} accepts connections.` }));
    socket.once("timeout", () =>
      done({
        check,
        status: "fail",
        message: `No answer from ${where} within ${config.timeoutMs * 3} ms.`,
        fix: "Check the device's address, its power and the network route.",
      }),
    );
    socket.once("error", (err) =>
      done({
        check,
        status: "fail",
        message: `Cannot connect to ${where}: ${errorCode(err)}.`,
        fix: "Check the device's address and port (502 is the Modbus TCP default), and that it is powered and on the network.",
      }),
    );
  });
}

/**
 * Two TCP buses whose hosts are different names for one address (localhost and 127.0.0.1,
 * a DNS name and its IP), with an actuator on the same unit of each: one device, two
 * actuators. The configuration itself catches the same spelling; this needs name lookups.
 */
async function checkSharedTcpDevices(config: GatewayConfig): Promise<Finding[]> {
  const addresses = new Map<string, string[]>();
  for (const [name, bus] of Object.entries(config.buses)) {
    if (bus.type !== "tcp") continue;
    const found = await dns.lookup(bus.host, { all: true }).catch(() => []);
    addresses.set(
      name,
      found.map((a) => `${a.address}:${bus.port}`),
    );
  }
  const seen = new Map<string, number>();
  const findings: Finding[] = [];
  config.actuators.forEach((a, i) => {
    for (const endpoint of new Set(addresses.get(a.bus) ?? [])) {
      const other = seen.get(`${endpoint} ${a.unit}`);
      const first = other === undefined ? undefined : config.actuators[other]!;
      if (first === undefined) {
        seen.set(`${endpoint} ${a.unit}`, i);
      } else if (first.bus !== a.bus) {
        findings.push({
          check: "buses",
          status: "fail",
          message: `actuators[${i}] (${a.id}, bus "${a.bus}") and actuators[${other}] (${first.id}, bus "${first.bus}") are both unit ${a.unit} at ${endpoint}: one device, two actuators, two lease tables, and both controllers' commands reach it.`,
          fix: `Keep one of them: put every unit at ${endpoint} under one bus.`,
        });
        return;
      }
    }
  });
  return findings;
}

// ---------------------------------------------------------------------------------------
// Fenced devices

/**
 * Each fenced actuator's device, read only: its identity block must say the fenced profile
 * with the configured setpoint registers (the daemon checks the same before it writes
 * anything, and grants no lease until it does), and its own fence must be readable. A bus
 * that cannot be opened now (a serial port the running daemon holds) is not probed: the
 * daemon's state says the same (`fencegate read`).
 */
async function checkFencedDevices(config: GatewayConfig): Promise<Finding[]> {
  const findings: Finding[] = [];
  for (const [name, busConfig] of Object.entries(config.buses)) {
    const fenced = config.actuators.filter((a) => a.bus === name && a.profile === "fenced");
    if (fenced.length === 0) continue;
    const { timeoutMs } = busConfig;
    const bus = new ModbusBus(
      // One attempt to open (no reopening within the probe), every unit's answer within the bus timeout.
      {
        name,
        link: busLink(busConfig),
        timeoutMs,
        reopenMinMs: 600_000,
        reopenMaxMs: 600_000,
        quietAfterTimeoutMs: quietAfterTimeoutMs(timeoutMs),
        offlineAfterFailures: OFFLINE_AFTER_FAILURES,
        queueLimitPerUnit: 4,
      },
      pino({ level: "silent" }),
    );
    for (const a of fenced) bus.addUnit(a.unit);
    try {
      const opened = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), 2 * timeoutMs);
        bus.once("link", (up) => {
          clearTimeout(timer);
          resolve(up);
        });
        bus.start();
      });
      for (const a of fenced) {
        const check = `device ${a.id}`;
        if (!opened) {
          findings.push({
            check,
            status: "info",
            message: `Not probed: bus ${name} cannot be opened now (if the running daemon holds it, \`fencegate read ${a.id}\` says whether the device identifies right).`,
          });
          continue;
        }
        findings.push(await probeFenced(check, a.unit, name, new ModbusDevice({ bus, unit: a.unit, profile: "fenced", points: a.points })));
      }
    } finally {
      await bus.close();
    }
  }
  return findings;
}

async function probeFenced(check: string, unit: number, bus: string, device: ModbusDevice): Promise<Finding> {
  try {
    const fence = await device.readFence();
    return {
      check,
      status: "ok",
      message: `Unit ${unit} on ${bus} identifies as a fenced profile device with the configured setpoint registers; its own fence is at token ${fence?.token ?? 0}.`,
    };
  } catch (err) {
    if (err instanceof DeviceMismatchError) {
      return {
        check,
        status: "fail",
        message: err.message,
        fix: "Check the unit id (another device may answer at it); a device without the fenced identity block needs profile: plain (the gateway alone then fences it).",
      };
    }
    return {
      check,
      status: "warn",
      message: `Unit ${unit} on ${bus} gave no usable answer to a read of its identity block (${(err as Error).message}).`,
      fix: "Check the device's power, wiring and unit id, and the bus settings (baud rate, parity); the daemon grants no lease on it until it answers.",
    };
  }
}

// ---------------------------------------------------------------------------------------
// Metrics

/** The HTTP port beyond loopback: say who can read it (anyone, or whoever has the credentials, in clear). */
function checkMetrics(config: GatewayConfig): Finding[] {
  const { enabled, host, port, auth } = config.metrics;
  if (!enabled || isLoopbackHost(host)) return [];
  if (auth !== undefined) {
    return [
      {
        check: "metrics",
        status: "info",
        message: `/metrics, /healthz and the status page listen on ${host}:${port} and ask for the credentials of metrics.auth, which travel in clear over plain HTTP.`,
        fix: "On a network you do not trust, keep metrics.host: 127.0.0.1 behind a TLS reverse proxy, or an SSH tunnel.",
      },
    ];
  }
  return [
    {
      check: "metrics",
      status: "warn",
      message: `/metrics and /healthz listen on ${host}:${port} and answer anyone who reaches it, without authentication: actuator ids, error rates, bus states.`,
      fix: "Keep metrics.host: 127.0.0.1 and scrape through an SSH tunnel or an authenticating reverse proxy, or firewall the port to the Prometheus server only.",
    },
  ];
}

// ---------------------------------------------------------------------------------------
// Broker

const TLS_TRUST = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** One sentence and one fix per way a connection to the broker fails. */
function explainBrokerError(err: unknown, mqtt: MqttConfig): { message: string; fix: string } {
  const url = new URL(mqtt.url);
  const where = `${url.hostname}:${url.port || (url.protocol === "mqtts:" ? 8883 : 1883)}`;
  const code = (err as { code?: unknown }).code;
  const text = (err as Error).message ?? String(err);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") {
    return {
      message: `The broker's host name ${url.hostname} does not resolve (${String(code)}).`,
      fix: "Check mqtt.url's host and the Pi's DNS (/etc/resolv.conf), or use the broker's address.",
    };
  }
  if (code === "ECONNREFUSED") {
    return {
      message: `Nothing accepts connections at ${where} (connection refused).`,
      fix: "Check that the broker runs and listens on that port (mosquitto: a listener line), and the port in mqtt.url.",
    };
  }
  if (code === "EHOSTUNREACH" || code === "ENETUNREACH" || code === "ETIMEDOUT" || code === "TIMEOUT") {
    return {
      message: `No answer from ${where} (${String(code)}).`,
      fix: "Check the network route and any firewall between the Pi and the broker.",
    };
  }
  if (typeof code === "string" && TLS_TRUST.has(code)) {
    return {
      message: `The broker's TLS certificate is not trusted: ${text} (${code}).`,
      fix: "Set mqtt.tls.caFile to the CA that signed the broker's certificate, and connect by the name the certificate carries.",
    };
  }
  if ((typeof code === "string" && (code.startsWith("ERR_SSL") || code === "EPROTO")) || /SSL|TLS|certificate/i.test(text)) {
    return {
      message: `The TLS handshake with ${where} failed: ${text}.`,
      fix: "Check that the port speaks TLS (8883, not 1883) and whether the broker requires a client certificate (mqtt.tls.certFile and keyFile).",
    };
  }
  // CONNACK refusals. Mosquitto answers a wrong password with "not authorized" (135) as
  // often as with "bad user name or password" (134), so the two are not told apart.
  if (code === 134 || code === 135 || code === 4 || code === 5) {
    const fix =
      "Check mqtt.username and the password (file) against the broker's password file (mosquitto_passwd), or give the client certificate it expects.";
    return mqtt.username === undefined
      ? { message: `The broker wants credentials and none were given (MQTT reason ${code}).`, fix }
      : {
          message: `The broker refused user ${mqtt.username}: a wrong password, an unknown user or a user it does not allow (MQTT reason ${code}).`,
          fix,
        };
  }
  if (code === "ECONNRESET" || code === "EPIPE" || code === "CLOSED") {
    return {
      message: `${where} closed the connection before accepting it (${String(code)}).`,
      fix: "The port may speak TLS (use mqtts://) or require a client certificate; see the broker's log.",
    };
  }
  return {
    message: `The broker connection failed: ${text}${code === undefined ? "" : ` (${String(code)})`}.`,
    fix: "See the broker's log for why it refused the connection.",
  };
}

/** A gateway group's etcd: reachable with the configured TLS and user, and who leads the group now. Reads only. */
/** etcd answers, who leads, and (given the whole configuration) whether the other members' actuators are configured as this one's. */
export async function checkGroup(group: GroupConfig, config?: GatewayConfig): Promise<Finding> {
  const check = "group etcd";
  const client = etcdClientFor(group);
  try {
    const leader = leaderOf(await client.get(leaderKeyOf(group.name)));
    const differs =
      config === undefined ? null : differencesSentence(group.name, await differingMembers(client, group.name, publishedConfig(config)));
    if (differs !== null) {
      return {
        check,
        status: "fail",
        message: `etcd answers; ${differs}`,
        fix: "Make actuators (ids, units, profiles, points, expiry) and the lease and command limits the same on every member and restart the one that differs; buses may differ.",
      };
    }
    const roomMs = leaderHangRoomMs(
      leadershipConfig(group.leaseTtlMs, group.selfFenceMarginMs),
      group.requestTimeoutMs,
      group.etcdElectionTimeoutMs,
    );
    return {
      check,
      status: "ok",
      message: `etcd answers at ${group.endpoints.join(", ")}; group ${group.name} is ${leader === "nobody" ? "led by nobody yet" : `led by ${leader}`}. A hung etcd leader is ridden out with ${roomMs} ms to spare if the members' --election-timeout is ${group.etcdElectionTimeoutMs} ms (group.etcdElectionTimeoutMs).`,
    };
  } catch (err) {
    return {
      check,
      status: "fail",
      message: `etcd does not answer the gateway: ${err instanceof Error ? err.message : String(err)}.`,
      fix: "Check group.endpoints, that the members run and have a quorum (etcdctl endpoint health --cluster), and group.tls, username and password.",
    };
  } finally {
    client.close();
  }
}

async function checkBroker(mqtt: MqttConfig, timeoutMs: number): Promise<Finding[]> {
  const check = "broker";
  let client: MqttClient;
  try {
    client = new MqttClient(streamBuilder(mqtt), {
      protocolVersion: mqtt.protocolVersion,
      // Not the daemon's id: the broker would disconnect a running daemon in our favour.
      clientId: `${mqtt.clientId}-doctor`.slice(0, 128),
      clean: true,
      reconnectPeriod: 0,
      connectTimeout: timeoutMs,
      ...(mqtt.username !== undefined ? { username: mqtt.username } : {}),
      ...(mqtt.password !== undefined ? { password: mqtt.password } : {}),
    });
  } catch (err) {
    return [
      {
        check,
        status: "fail",
        message: `Cannot set up the connection: ${(err as Error).message}.`,
        fix: "Check the TLS files in mqtt.tls.",
      },
    ];
  }
  const started = performance.now();
  const outcome = await new Promise<{ ok: true } | { ok: false; err: unknown }>((resolve) => {
    const timer = setTimeout(
      () => resolve({ ok: false, err: Object.assign(new Error(`no CONNACK within ${timeoutMs} ms`), { code: "TIMEOUT" }) }),
      timeoutMs,
    );
    const done = (r: { ok: true } | { ok: false; err: unknown }) => {
      clearTimeout(timer);
      resolve(r);
    };
    client.once("connect", () => done({ ok: true }));
    client.once("error", (err) => done({ ok: false, err }));
    client.once("close", () =>
      setTimeout(() => done({ ok: false, err: Object.assign(new Error("connection closed"), { code: "CLOSED" }) }), 50),
    );
  });
  try {
    if (!outcome.ok) {
      const { message, fix } = explainBrokerError(outcome.err, mqtt);
      return [{ check, status: "fail", message, fix }];
    }
    const connectMs = Math.round(performance.now() - started);
    const findings: Finding[] = [
      {
        check,
        status: "ok",
        message: `Connected to ${mqtt.url} as ${mqtt.username ?? "(anonymous)"} with MQTT ${mqtt.protocolVersion === 5 ? "5" : "3.1.1"} in ${connectMs} ms.`,
        details: { connectMs },
      },
    ];
    findings.push(await probeRequestTopics(client, mqtt));
    return findings;
  } finally {
    await client.endAsync(true).catch(() => {});
  }
}

/**
 * Whether another gateway on the broker has this gatewayId, or serves one of this one's
 * actuator ids: each answers `B/gateway/read` with its identity and actuators, and the one
 * of this configuration (this host, this journal) is told apart from a copy elsewhere.
 */
async function checkGatewayId(config: GatewayConfig): Promise<Finding[]> {
  const check = "gateway id";
  const id = config.gatewayId;
  const result = await probeGateways(config.mqtt, { waitForAll: true });
  if (result.kind === "unreachable")
    return [
      {
        check,
        status: "info",
        message: `Whether another gateway uses gatewayId "${id}" or one of its actuator ids was not checked: the broker cannot be reached (${result.reason}).`,
      },
    ];
  return [sameGatewayId(config, result), sharedActuatorIds(config, result)];
}

/** How many gateways answered the probe, and which. */
function answeredCount(result: Extract<ProbeResult, { kind: "answered" }>): string {
  const ids = [...new Set(result.gateways.map((g) => g.id))].sort();
  return ids.length === 0 ? "no gateway answered" : `${ids.length} gateway${ids.length === 1 ? "" : "s"} answered: ${ids.join(", ")}`;
}

function sharedActuatorIds(config: GatewayConfig, result: Extract<ProbeResult, { kind: "answered" }>): Finding {
  const check = "actuator ids";
  const self = identityOf(config.gatewayId, config.journal.path, {
    actuators: config.actuators.map((a) => a.id),
    group: config.group?.name,
  });
  const conflict = actuatorConflictOf(result, self);
  if (conflict === undefined)
    return { check, status: "ok", message: `No other gateway serves an actuator of this one (${answeredCount(result)}).` };
  return {
    check,
    status: "fail",
    message: `${new ActuatorConflictError(self, conflict.other, conflict.actuators, config.mqtt.url).message} The daemon refuses to start beside it (exit 78).`,
    fix: `Serve each actuator id from one gateway only (or make both members of one gateway group).`,
  };
}

function sameGatewayId(config: GatewayConfig, result: Extract<ProbeResult, { kind: "answered" }>): Finding {
  const check = "gateway id";
  const id = config.gatewayId;
  const same = result.gateways.filter((g) => g.id === id);
  const mine = identityOf(id, config.journal.path).instance;
  const others = same.filter((g) => g.instance !== mine);
  const where = (gs: readonly GatewayIdentity[]) => gs.map((g) => `host ${g.host}, pid ${g.pid}`).join("; ");
  if (others.length > 0 || same.length > 1) {
    return {
      check,
      status: "fail",
      message: `Another fencegate with gatewayId "${id}" is connected to ${config.mqtt.url} (${where(others.length > 0 ? others : same)}): two gateways with one id take each other's MQTT client id and both answer for the same actuators; the daemon refuses to start beside it (exit 78).`,
      fix: `Give this gateway its own gatewayId in the configuration, or stop the other one.`,
    };
  }
  if (same.length === 1)
    return {
      check,
      status: "ok",
      message: `The daemon of this configuration is running (${where(same)}); no other gateway uses gatewayId "${id}".`,
    };
  return { check, status: "ok", message: `No gateway on the broker uses gatewayId "${id}" (${answeredCount(result)}).` };
}

/** An actuator id no deployment uses: no running gateway subscribes to its requests, so none answers the probe. */
const PROBE_ACTUATOR = "fencegate-doctor-probe";

/**
 * Whether the gateway's user may read the request topics. A SUBACK proves little (Mosquitto
 * grants every subscription and filters on delivery), so a probe read request is published
 * and must come back on the subscription.
 */
async function probeRequestTopics(client: MqttClient, mqtt: MqttConfig): Promise<Finding> {
  const check = "broker acl";
  const who = mqtt.username ?? "this client";
  const filters = [...requestSubscriptions(mqtt.baseTopic)];
  const granted: ISubscriptionGrant[] = await client.subscribeAsync(filters, { qos: 1 }).catch(() => []);
  const denied = filters.filter((f) => (granted.find((g) => g.topic === f)?.qos ?? 0x80) >= 0x80);
  const fix = "Let the gateway's user read <base>/+/lease/+, <base>/+/command and <base>/+/read (config/mosquitto/acl).";
  if (denied.length > 0)
    return {
      check,
      status: "fail",
      message: `The broker does not let ${who} subscribe to ${denied.join(", ")}: requests would never arrive.`,
      fix,
    };
  const topic = `${mqtt.baseTopic}/${PROBE_ACTUATOR}/read`;
  const id = `doctor-${process.pid}-${Date.now()}`;
  const payload = JSON.stringify({ id });
  const arrived = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 3000);
    client.on("message", (t, p) => {
      if (t === topic && p.toString() === payload) {
        clearTimeout(timer);
        resolve(true);
      }
    });
  });
  const published = await client.publishAsync(topic, payload, { qos: 1 }).then(
    () => null,
    (err: Error) => err.message,
  );
  if (published !== null) {
    return {
      check,
      status: "info",
      message: `May subscribe to the request topics; whether requests reach it was not checked: ${who} may not publish a probe request (${published}).`,
    };
  }
  return (await arrived)
    ? { check, status: "ok", message: `Receives requests: a probe read request on ${topic} came back on the gateway's subscriptions.` }
    : {
        check,
        status: "fail",
        message: `A probe request on ${topic} never arrived on the gateway's subscriptions: the broker's ACL does not let ${who} read the request topics (or publish them), so requests would never arrive.`,
        fix,
      };
}

// ---------------------------------------------------------------------------------------
// Journal

/** The directory: writable, and how long a durable write takes there. */
function checkJournalDir(journalPath: string, slowFsyncMs: number): Finding[] {
  const check = "journal dir";
  const dir = path.dirname(journalPath);
  if (!fs.existsSync(dir)) {
    let parent = path.dirname(dir);
    while (!fs.existsSync(parent) && parent !== path.dirname(parent)) parent = path.dirname(parent);
    const creatable = writable(parent);
    return [
      creatable
        ? {
            check,
            status: "warn",
            message: `${dir} does not exist yet; the daemon does not create it (a directory that is gone may be a disk not mounted).`,
            fix: `Mount the disk that holds it, or create it for the service user (install -d -o fencegate -g fencegate -m 0750 ${dir}); then ${INIT_FIX}`,
          }
        : {
            check,
            status: "fail",
            message: `${dir} does not exist and ${parent} is not writable by ${os.userInfo().username}.`,
            fix: `mkdir -p ${dir} && chown fencegate: ${dir} (or journal.path under /var/lib/fencegate with StateDirectory=fencegate).`,
          },
    ];
  }
  if (!writable(dir)) {
    return [
      {
        check,
        status: "fail",
        message: `${dir} is not writable by ${os.userInfo().username}: the journal and its -wal file live there.`,
        fix: `chown fencegate: ${dir} && chmod 0750 ${dir}.`,
      },
    ];
  }
  const probe = path.join(dir, `.fencegate-doctor-${process.pid}`);
  const samples: number[] = [];
  try {
    const fd = fs.openSync(probe, "wx", 0o600);
    try {
      const block = Buffer.alloc(4096, 0x5a);
      for (let i = 0; i < 16; i++) {
        const t0 = performance.now();
        fs.writeSync(fd, block);
        fs.fdatasyncSync(fd);
        samples.push(performance.now() - t0);
      }
    } finally {
      fs.closeSync(fd);
    }
  } catch (err) {
    return [
      {
        check,
        status: "fail",
        message: `Cannot write and sync a file in ${dir}: ${(err as Error).message}.`,
        fix: "Check the file system (read-only after errors? full? `dmesg`, `df -h`).",
      },
    ];
  } finally {
    fs.rmSync(probe, { force: true });
  }
  samples.sort((a, b) => a - b);
  const median = samples[samples.length >> 1]!;
  const max = samples[samples.length - 1]!;
  const figures = `median ${median.toFixed(2)} ms, max ${max.toFixed(2)} ms over ${samples.length} writes`;
  const details = { fsyncMedianMs: round2(median), fsyncMaxMs: round2(max) };
  return [
    median > slowFsyncMs
      ? {
          check,
          status: "warn",
          message: `${dir}: write + fdatasync is slow (${figures}); every lease grant waits for one before it is answered, and commands' audit records fall behind (journal.auditLagMs).`,
          fix: "Use a better SD card (A1/A2 class) or an SSD over USB for /var/lib/fencegate.",
          details,
        }
      : { check, status: "ok", message: `${dir} is writable; write + fdatasync ${figures}.`, details },
  ];
}

const INIT_FIX =
  "If the journal is on a disk that is not mounted, mount it; if this gateway is new, run `fencegate journal init --config <this file>` as the service's user (docs/deploy.md §2).";
const RECOVER_FIX =
  "Put the missing file back if you have it; otherwise stop the controllers of plain actuators and run `fencegate journal recover --config <this file>` (docs/deploy.md, the journal).";

function writable(dir: string): boolean {
  try {
    fs.accessSync(dir, fs.constants.W_OK | fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

/**
 * The journal file: the same checks the daemon's start makes (schema, quick_check, every
 * row), on a copy in a temp directory, because loading converts unfinished commands and
 * the daemon may hold the file's lock.
 */
function checkJournalFile(config: GatewayConfig): Finding[] {
  const check = "journal";
  const file = config.journal.path;
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch {
    return missingJournalFindings(config);
  }
  try {
    fs.accessSync(file, fs.constants.R_OK | fs.constants.W_OK);
  } catch {
    return [
      {
        check,
        status: "fail",
        message: `${file} is not readable and writable by ${os.userInfo().username}.`,
        fix: `chown fencegate: ${file}*`,
      },
    ];
  }
  // The daemon's single-writer lock: a flock on the database file (SQLite's own locks are WAL's shared ones).
  const running = writerLockHeld(file);
  const copyDir = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-doctor-"));
  const copy = path.join(copyDir, "journal.db");
  try {
    fs.copyFileSync(file, copy);
    for (const beside of [`${file}-wal`, markPath(file)])
      if (fs.existsSync(beside)) fs.copyFileSync(beside, copy + beside.slice(file.length));
    return loadedJournalFindings(config, copy, stat.size, running);
  } catch (err) {
    const message = (err instanceof JournalError ? err.message : (err as Error).message).replaceAll(copy, file);
    const live = running ? " The daemon was running: stop it (systemctl stop fencegate) and run doctor again before acting on this." : "";
    const fix =
      err instanceof NativeModuleError
        ? `Run \`npm rebuild\` in ${err.installDir} as the user who installed fencegate (after every Node major upgrade; docs/deploy.md §1).`
        : err instanceof JournalError && err.code === "JOURNAL_LOST_HISTORY"
          ? RECOVER_FIX
          : "Keep the journal's -mark file where it is, restore the journal from a backup or move it and its -wal file aside, then run `fencegate journal recover --config <this file>`, which sets every token above the mark's floor (docs/deploy.md §7).";
    return [{ check, status: "fail", message: `${message}${live}`, fix }];
  } finally {
    fs.rmSync(copyDir, { recursive: true, force: true });
  }
}

/** The journal file does not exist: what the daemon's start will do about it. */
function missingJournalFindings(config: GatewayConfig): Finding[] {
  const check = "journal";
  const file = config.journal.path;
  if (fs.existsSync(markPath(file))) {
    return [
      {
        check,
        status: "fail",
        message: `${file} is missing, but ${markPath(file)} says a journal was kept here: the daemon will refuse to start (exit 74) rather than grant its tokens again.`,
        fix: RECOVER_FIX,
      },
    ];
  }
  if (config.journal.createIfMissing)
    return [
      {
        check,
        status: "info",
        message: `${file} does not exist yet: the first start creates it (journal.createIfMissing), and tokens start above the fences the fenced devices report.`,
      },
    ];
  return [
    {
      check,
      status: "fail",
      message: `${file} does not exist: the daemon will refuse to start (exit 74) rather than start a fresh journal by itself.`,
      fix: INIT_FIX,
    },
  ];
}

/** Loads the journal's copy `copy` as the daemon's start would, and says what it holds. */
function loadedJournalFindings(config: GatewayConfig, copy: string, sizeBytes: number, running: boolean): Finding[] {
  const check = "journal";
  const file = config.journal.path;
  const journal = openSqliteJournal({ path: copy, recentLimit: config.commands.recentLimit });
  try {
    const snapshots = journal.load();
    const tokens = Object.fromEntries([...snapshots].map(([id, s]) => [id, { highestGranted: s.highestGranted, fence: s.fence }]));
    const unknown = [...snapshots.keys()].filter((id) => !config.actuators.some((a) => a.id === id));
    const inUse = running ? " It is in use by a running daemon (its writer lock is held); a copy was checked." : "";
    const findings: Finding[] = [
      {
        check,
        status: "ok",
        message: `${file} loads: ${snapshots.size} actuator(s) on record, ${(sizeBytes / 1024).toFixed(0)} KiB.${inUse}`,
        details: { actuators: tokens },
      },
    ];
    if (unknown.length > 0)
      findings.push({
        check,
        status: "info",
        message: `The journal remembers actuators no longer configured: ${unknown.join(", ")}. Harmless; their records stay.`,
      });
    return findings;
  } finally {
    journal.close();
  }
}
