/**
 * `fencegate sim` as its own process, as a real actuator is its own device: the simulator
 * then answers on its own CPU time, not between the controllers' and the test's work.
 */
import { startFencegate, type ChildProcess } from "./processes.ts";

export interface SimProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
  /** The last of what it wrote to stderr (why it exited, if it did). */
  readonly stderr: string;
}

/** Starts `node <bin> sim <args>` and resolves once it printed its ready line. */
export async function startSimProcess(bin: string, args: readonly string[], readyTimeoutMs = 20_000): Promise<SimProcess> {
  // Its owner stops it (the chaos run cuts its link, power and life as faults).
  const child = startFencegate(null, ["sim", ...args], { bin });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  let out = "";
  let err = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (err = (err + s).slice(-4000)));
  await new Promise<void>((resolveReady, reject) => {
    const timer = setTimeout(() => reject(new Error(`fencegate sim not ready in ${readyTimeoutMs / 1000} s: ${err}`)), readyTimeoutMs);
    child.stdout!.setEncoding("utf8").on("data", (s: string) => {
      out += s;
      if (out.includes('"ready":true')) {
        clearTimeout(timer);
        resolveReady();
      }
    });
    void exited.then(() => reject(new Error(`fencegate sim exited: ${err}`)));
  });
  return {
    child,
    exited,
    get stderr() {
      return err;
    },
  };
}
