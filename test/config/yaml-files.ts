// Config files written for a test, in a temporary directory of their own.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A function that writes its text to a new YAML file and returns the path. */
export function yamlFiles(prefix: string): { dir: string; yamlFile: (text: string) => string } {
  const dir = mkdtempSync(join(tmpdir(), `rollgym-${prefix}-`));
  let count = 0;
  return {
    dir,
    yamlFile: (text) => {
      const path = join(dir, `c${count++}.yaml`);
      writeFileSync(path, text);
      return path;
    },
  };
}
