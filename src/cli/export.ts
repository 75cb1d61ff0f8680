// `rollgym export FILE`: an episode file (rollout --out) as a self-contained HTML page or an
// SVG image strip, the same ones the web page's Export buttons save, to share or to attach to
// experiment logs.
import { writeFileSync } from "node:fs";
import { basename } from "node:path";
import { exportHtml, exportSvg } from "../server/web/client/export.ts";
import { groupViews } from "../server/web/client/records.ts";
import { expectPositionals, type FlagSpec, parseArgs, parseChoice } from "./args.ts";
import { CONFIG_FLAGS, setup } from "./context.ts";
import { parseIdList, readEpisodeFileOrExplain } from "./episode-files.ts";
import { io } from "./io.ts";

export const EXPORT_FLAGS: Record<string, FlagSpec> = {
  format: {
    kind: "value",
    arg: "html|svg",
    help: "an HTML page (default) or one SVG image, a row per episode",
  },
  out: {
    kind: "value",
    arg: "PATH",
    help: 'write here instead of stdout, and print {"out","format","groups","episodes","bytes"}',
  },
  group: { kind: "value", arg: "N,…", help: "only these groups (group ids, comma-separated)" },
  // Custom tags (custom_envs, plugins) draw their pictures with their own grid symbols.
  ...CONFIG_FLAGS,
};

export async function exportCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("export", argv, EXPORT_FLAGS);
  const [path] = expectPositionals("export", args, ["FILE"]);
  const format = parseChoice("--format", args.values.get("format") ?? "html", ["html", "svg"] as const);
  const file = await readEpisodeFileOrExplain("export", path);
  let groups = groupViews(file);
  const groupText = args.values.get("group");
  if (groupText !== undefined) {
    const wanted = parseIdList("--group", groupText, new Set(groups.map((g) => g.group)), "group");
    groups = groups.filter((g) => wanted.has(g.group));
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
  else {
    writeFileSync(out, text);
    const episodes = groups.reduce((n, g) => n + g.episodes.length, 0);
    const written = { out, format, groups: groups.length, episodes, bytes: Buffer.byteLength(text) };
    io().stdout.write(`${JSON.stringify(written)}\n`);
  }
}
