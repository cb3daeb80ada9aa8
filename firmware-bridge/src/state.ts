/**
 * The simulated EEPROM: one JSON state file holding every unit of a simulator, replaced
 * atomically on each save (write temp + fsync + rename + fsync directory), so a crash or
 * power cycle leaves either the old or the new contents, never a torn file.
 *
 * With `loseUnsynced`, saves go to a RAM cache only and reach the file at `sync()`; a power
 * cycle (`reload()`) then loses them, like a device that answers before its write is durable.
 * That mode exists so tests can show what such a device does to a gateway.
 */
import fs from "node:fs";
import path from "node:path";
import type { Eeprom, PersistedUnit } from "./device.ts";

interface StateFileV1 {
  readonly version: 1;
  readonly units: Record<string, PersistedUnit>;
}

export function writeFileAtomic(file: string, contents: string): void {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  const fd = fs.openSync(tmp, "w", 0o644);
  try {
    fs.writeSync(fd, contents);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  const dfd = fs.openSync(dir, "r");
  try {
    fs.fsyncSync(dfd);
  } finally {
    fs.closeSync(dfd);
  }
}

function readState(file: string): Map<number, PersistedUnit> {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return new Map();
    throw err;
  }
  const parsed = JSON.parse(text) as StateFileV1;
  if (parsed.version !== 1 || typeof parsed.units !== "object") throw new Error(`${file}: not a fencegate sim state file`);
  return new Map(Object.entries(parsed.units).map(([k, v]) => [Number(k), v]));
}

export class FileEeprom implements Eeprom {
  private durable: Map<number, PersistedUnit>;
  private cache: Map<number, PersistedUnit>;
  /** Fault injection: make saves fail (EEPROM worn out / disk full). */
  failSaves = false;

  constructor(
    readonly file: string,
    readonly loseUnsynced = false,
  ) {
    this.durable = readState(file);
    this.cache = new Map(this.durable);
  }

  load(unit: number): PersistedUnit | undefined {
    return this.cache.get(unit);
  }

  save(unit: number, state: PersistedUnit): void {
    if (this.failSaves) throw new Error("EEPROM write failed (injected)");
    this.cache.set(unit, state);
    if (!this.loseUnsynced) this.sync();
  }

  /** Make everything saved so far durable. */
  sync(): void {
    const units: Record<string, PersistedUnit> = {};
    for (const [k, v] of [...this.cache].sort((a, b) => a[0] - b[0])) units[String(k)] = v;
    const doc: StateFileV1 = { version: 1, units };
    writeFileAtomic(this.file, JSON.stringify(doc, null, 1) + "\n");
    this.durable = new Map(this.cache);
  }

  /** Power cycle (of `unit`, or all): its unsynced saves are lost, the durable contents come back. */
  reload(unit?: number): void {
    if (unit === undefined) {
      this.cache = new Map(this.durable);
      return;
    }
    const kept = this.durable.get(unit);
    if (kept) this.cache.set(unit, kept);
    else this.cache.delete(unit);
  }
}
