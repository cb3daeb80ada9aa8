import { expect } from "vitest";
import { loadConfigFile } from "../../src/config/load.ts";
import { parseConfig } from "../../src/config/parse.ts";
import { ConfigError, type ConfigProblem } from "../../src/config/problems.ts";

/** The problems `parseConfig` reports for `value`; fails the test if it parses. */
export function problemsOf(value: unknown): readonly ConfigProblem[] {
  try {
    parseConfig(value);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error("expected the configuration to be refused");
}

export function pathsOf(value: unknown): string[] {
  return problemsOf(value).map((p) => p.path);
}

/** The one problem reported at `path`; fails unless there is exactly one problem in all. */
export function onlyProblem(value: unknown): ConfigProblem {
  const problems = problemsOf(value);
  expect(problems, JSON.stringify(problems)).toHaveLength(1);
  return problems[0]!;
}

/** The problems `loadConfigFile` reports for the file; fails the test if it loads. */
export function fileProblemsOf(file: string): readonly ConfigProblem[] {
  try {
    loadConfigFile(file);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error("expected the configuration file to be refused");
}
