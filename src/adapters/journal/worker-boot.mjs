// The journal's writer thread when fencegate runs from its TypeScript sources (tsx): a
// worker does not inherit the parent's loader, so it registers tsx itself before loading
// worker.ts. The build runs dist/journal-worker.js instead (worker-client.ts). A failure to
// load is answered to the caller waiting for "open", which would otherwise wait forever.
import { workerData } from "node:worker_threads";

try {
  const { register } = await import("tsx/esm/api");
  register();
  await import(new URL("./worker.ts", import.meta.url).href);
} catch (error) {
  workerData.syncAnswers.postMessage({
    ok: false,
    error: { name: "Error", message: `the journal's writer thread could not start: ${error?.stack ?? error}` },
  });
  Atomics.store(workerData.signal, 0, 1);
  Atomics.notify(workerData.signal, 0);
}
