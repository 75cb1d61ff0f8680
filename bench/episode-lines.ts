// Hand-made episode files start from these lines: the attack bench's hostile uploads and the
// upload tests build theirs on them.

/** The header and summary lines of an empty Bandit episode file, for hand-made files. */
export const EMPTY_FILE_LINES = {
  header: JSON.stringify({
    type: "header",
    format: "rollgym.episodes",
    version: 1,
    mode: "train",
    seed: 1,
    group_size: 1,
    tags: [{ tag: "Bandit", groups: 1 }],
    policy: "oracle",
    settings: {},
  }),
  summary: JSON.stringify({ type: "summary", episodes: 0, failed: 0, kept_groups: [], metrics: {} }),
};
