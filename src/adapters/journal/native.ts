/**
 * better-sqlite3's native module failing to load: after a Node major upgrade without
 * `npm rebuild` it was built for another Node (another NODE_MODULE_VERSION). The journal is
 * fine then, and advice about the journal (restore it, move it aside) would be wrong and
 * costly: the install needs rebuilding, a configuration problem (exit 78, so systemd does
 * not restart into it every 5 s). docs/deploy.md §1.
 */
import { createRequire } from "node:module";
import path from "node:path";

/** NODE_MODULE_VERSION → Node major (nodejs.org's ABI registry), for the sentence. */
const NODE_OF_ABI: Readonly<Record<number, number>> = { 93: 16, 108: 18, 115: 20, 120: 21, 127: 22, 131: 23, 137: 24, 141: 25 };

export class NativeModuleError extends Error {
  override readonly name = "NativeModuleError";
  readonly code = "NATIVE_MODULE_MISMATCH";
  constructor(
    message: string,
    /** Where `npm rebuild` is to run: the directory holding node_modules/better-sqlite3. */
    readonly installDir: string,
    options?: { cause?: unknown },
  ) {
    super(`NATIVE_MODULE_MISMATCH: ${message}`, options);
  }
}

/** The NativeModuleError for `error` when it is a native module that failed to load, else null. */
export function nativeModuleError(error: unknown): NativeModuleError | null {
  if ((error as { code?: unknown })?.code !== "ERR_DLOPEN_FAILED") return null;
  const message = error instanceof Error ? error.message : String(error);
  const dir = installDir(message);
  const abi = /using\s+NODE_MODULE_VERSION (\d+)/.exec(message)?.[1];
  const rebuild = `run \`npm rebuild\` in ${dir} (as the user who installed it), then start again. The journal was not opened and is not at fault.`;
  if (abi === undefined) {
    return new NativeModuleError(`better-sqlite3's native module cannot be loaded (${message.replace(/\s+/g, " ")}): ${rebuild}`, dir, {
      cause: error,
    });
  }
  const node = NODE_OF_ABI[Number(abi)];
  const built = node === undefined ? `a Node with NODE_MODULE_VERSION ${abi}` : `Node ${node} (NODE_MODULE_VERSION ${abi})`;
  return new NativeModuleError(
    `better-sqlite3 was built for ${built}, and this is Node ${process.versions.node} (${process.versions.modules}): ${rebuild}`,
    dir,
    { cause: error },
  );
}

/** From the module's path in Node's message ("The module '/opt/fencegate/node_modules/…'"), else where this code resolves it. */
function installDir(message: string): string {
  const file = /The module '([^']+)'/.exec(message)?.[1];
  const at = file?.lastIndexOf(`${path.sep}node_modules${path.sep}`) ?? -1;
  if (file !== undefined && at > 0) return file.slice(0, at);
  try {
    return path.dirname(path.dirname(path.dirname(createRequire(import.meta.url).resolve("better-sqlite3/package.json"))));
  } catch {
    return process.cwd();
  }
}
