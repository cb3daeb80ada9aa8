/**
 * A real disk that stops answering: a small ext4 filesystem in a file, loop-mounted, frozen
 * with fsfreeze (every write to it, and every fault on a shared mapping of its files, waits
 * in the kernel until the thaw). Needs root and loop devices: {@link loopExt4} returns null
 * where they are missing, and the test skips.
 *
 * The thaw comes from a process started before the freeze: a process with a thread waiting
 * in a page fault on the frozen filesystem cannot fork (fork write-locks every mapping), so
 * a test that froze its own journal's thread could not start `fsfreeze -u` then.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runToolOrThrow, startProcess, type ChildProcess } from "./processes.ts";

export interface FrozenDisk {
  /** Where the filesystem is mounted. */
  readonly dir: string;
  freeze(): void;
  thaw(): Promise<void>;
  /** Thaws (whatever happened), unmounts, removes the image. */
  remove(): Promise<void>;
}

export function loopExt4(name: string): FrozenDisk | null {
  if (process.getuid?.() !== 0) return null;
  const base = mkdtempSync(join(tmpdir(), `fencegate-${name}-`));
  const image = join(base, "disk.img");
  const dir = join(base, "mnt");
  mkdirSync(dir);
  try {
    runToolOrThrow("truncate", ["-s", "64M", image]);
    runToolOrThrow("mkfs.ext4", ["-q", "-F", image]);
    runToolOrThrow("mount", ["-o", "loop", image, dir]);
  } catch {
    rmSync(base, { recursive: true, force: true });
    return null;
  }
  let thawer: ChildProcess | null = null;
  const disk: FrozenDisk = {
    dir,
    freeze() {
      // Ended by thaw(), through its stdin; remove() thaws whatever happened.
      const waiting = startProcess(null, "sh", ["-c", 'read go; exec fsfreeze -u "$0"', dir], { stdio: ["pipe", "ignore", "inherit"] });
      runToolOrThrow("fsfreeze", ["-f", dir]);
      thawer = waiting;
    },
    async thaw() {
      const waiting = thawer;
      if (waiting === null) return;
      thawer = null;
      const exited = new Promise((resolve) => waiting.once("exit", resolve));
      waiting.stdin!.end("\n");
      await exited;
    },
    async remove() {
      try {
        await disk.thaw();
      } finally {
        runToolOrThrow("umount", ["-l", dir]);
        rmSync(base, { recursive: true, force: true });
      }
    },
  };
  return disk;
}
