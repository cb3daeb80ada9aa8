// Placeholder until the firmware-bridge issue lands its simulator CLI.
export async function main(_argv: string[]): Promise<number> {
  console.error("fencegate sim: not built yet");
  return 70;
}
