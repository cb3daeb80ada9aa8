/**
 * Serial ports that are free the moment close() returns.
 *
 * serialport takes an exclusive flock() on open, and the kernel drops the lock only when the
 * last reference to the open file goes. serialport reads and writes with fs.read/fs.write,
 * which run in libuv's thread pool or, on Node 24 by default, in io_uring's kernel workers:
 * one still in flight at close() keeps the file, and its lock, after close() has called back.
 * Reopening the same path then fails with "Cannot lock port" although nobody uses it
 * (measured on a pty: 5 to 11 ms after close() with the thread pool; with io_uring up to
 * 1.4 s, or until data arrives for the orphaned read, which also steals that data).
 *
 * This binding does serialport's own read and write loops (unixRead, unixWrite: retry on
 * EAGAIN once the poller says the fd is ready) with readSync/writeSync on the non-blocking fd:
 * each call returns at once, on the main thread, so no read or write can outlive close().
 */
import fs from "node:fs";
import { LinuxBinding } from "@serialport/bindings-cpp";
import type { AutoDetectTypes, LinuxBindingInterface } from "@serialport/bindings-cpp";
import { unixRead } from "@serialport/bindings-cpp/dist/unix-read.js";
import { unixWrite } from "@serialport/bindings-cpp/dist/unix-write.js";
import { SerialPort } from "serialport";
import type { SerialPortOpenOptions } from "serialport";

type ReadAsync = NonNullable<Parameters<typeof unixRead>[0]["fsReadAsync"]>;
type WriteAsync = NonNullable<Parameters<typeof unixWrite>[0]["fsWriteAsync"]>;
// unixRead/unixWrite call these with (fd, buffer, offset, length[, position]) only.
const readNow = (async (fd: number, buffer: Buffer, offset: number, length: number, position: number | null) => ({
  bytesRead: fs.readSync(fd, buffer, offset, length, position),
  buffer,
})) as ReadAsync;
const writeNow = (async (fd: number, buffer: Buffer, offset: number, length: number) => ({
  bytesWritten: fs.writeSync(fd, buffer, offset, length),
  buffer,
})) as WriteAsync;

/** serialport's Linux binding with reads and writes done inline (see above). */
export const InlineIoBinding: LinuxBindingInterface = {
  ...LinuxBinding,
  async open(options) {
    const port = await LinuxBinding.open(options);
    port.read = (buffer, offset, length) => unixRead({ binding: port, buffer, offset, length, fsReadAsync: readNow });
    port.write = (buffer) => unixWrite({ binding: port, buffer, fsWriteAsync: writeNow });
    return port;
  },
};

/** An open SerialPort on {@link InlineIoBinding} (autoOpen is ignored). */
export async function openSerialPort(options: SerialPortOpenOptions<AutoDetectTypes>): Promise<SerialPort> {
  // SerialPort puts its detected binding first: a binding among the options replaces it.
  const port = new SerialPort({
    ...options,
    binding: InlineIoBinding,
    autoOpen: false,
  } as unknown as SerialPortOpenOptions<AutoDetectTypes>);
  await new Promise<void>((resolve, reject) => port.open((err) => (err ? reject(err) : resolve())));
  return port;
}
