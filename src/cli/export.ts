// `rollgym export FILE`: an episode file (rollout --out) as a self-contained HTML page or an
// SVG image strip, the same ones the web page's Export buttons save, to share or to attach to
// experiment logs.
import { writeFileSync } from "node:fs";
import { basename } from "node:path";
import { EpisodeFileError, readEpisodeFile } from "../record/episode-file.ts";
import { exportHtml, exportSvg } from "../server/web/client/export.ts";
import { groupViews } from "../server/web/client/records.ts";
import {
  expectPositionals,
  type FlagSpec,
  parseArgs,
  parseChoice,
  parseInteger,
  UsageError,
} from "./args.ts";
import { CONFIG_FLAGS, setup } from "./context.ts";
import { io } from "./io.ts";

export const EXPORT_FLAGS: Record<string, FlagSpec> = {
  format: {
    kind: "value",
    arg: "html|svg",
    help: "an HTML page (default) or one SVG image, a row per episode",
  },
  out: { kind: "value", arg: "PATH", help: "write here instead of stdout" },
  group: { kind: "value", arg: "N,…", help: "only these groups (group ids, comma-separated)" },
  // Custom tags (custom_envs, plugins) draw their pictures with their own grid symbols.
  ...CONFIG_FLAGS,
};

export async function exportCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("export", argv, EXPORT_FLAGS);
  const [path] = expectPositionals("export", args, ["FILE"]);
  const format = parseChoice("--format", args.values.get("format") ?? "html", ["html", "svg"] as const);
  let file: Awaited<ReturnType<typeof readEpisodeFile>>;
  try {
    file = await readEpisodeFile(path);
  } catch (error) {
    if (error instanceof EpisodeFileError) throw new UsageError(`export: ${error.message}`);
    const code = (error as NodeJS.ErrnoException).code;
    if (code) throw new UsageError(`export: cannot read ${JSON.stringify(path)}: ${code}`);
    throw error;
  }
  let groups = groupViews(file);
  const groupText = args.values.get("group");
  if (groupText !== undefined) {
    const wanted = groupText
      .split(",")
      .map((t) => parseInteger("--group", t.trim(), 0, Number.MAX_SAFE_INTEGER));
    const missing = wanted.find((id) => !groups.some((g) => g.group === id));
    if (missing !== undefined)
      throw new UsageError(`--group: no group ${missing} in this file; allowed: 0..${groups.length - 1}`);
    groups = groups.filter((g) => wanted.includes(g.group));
  }
  const { registry } = await setup(args, []);
  const styleOf = (tag: string) => {
    if (!registry.hasTag(tag)) return undefined;
    const resolved = registry.tag(tag);
    return { env_type: resolved.spec.env_type, config: resolved.config };
  };
  const { header, summary } = file;
  const batch = {
    title: basename(path),
    about: `${header.mode} · ${header.tags.map((t) => `${t.tag}×${t.groups}`).join(", ")} · group size ${header.group_size} · seed ${header.seed} · policy ${header.policy}`,
    groups,
    metrics: summary.metrics,
  };
  const text = format === "html" ? exportHtml(batch, styleOf) : exportSvg(batch, styleOf);
  const out = args.values.get("out");
  if (out === undefined) io().stdout.write(text);
  else writeFileSync(out, text);
}
