// An episode in token mode: the first prompt is rendered once, then every turn sends the whole
// token log as the prompt and appends exactly what the engine sampled plus the chat-template
// delta of the next user message. Earlier tokens are never dropped or rewritten: when the next
// turn does not fit the context, the episode ends as `context_full`. At the end the decoded
// log is compared with the chat template's rendering of the same conversation, until the
// template is verified append-only.
import type { ChatMessage, SamplingParams } from "../llm/chat.ts";
import { requestSeed } from "../llm/policy.ts";
import { turnSlot } from "../llm/slices.ts";
import type { TokenEngine, TurnEnd } from "../llm/token-engine.ts";
import type { Episode } from "./episode.ts";
import { TokenLog, textDrift } from "./token-log.ts";
import { playTurns, type TurnHooks } from "./turns.ts";

/** What a token episode reads of its batch request (a BatchRequest). */
export interface TokenEpisodeRequest {
  sampling: Omit<SamplingParams, "seed">;
  seed: number;
  minResponseTokens?: number;
}

export async function playTokenEpisode(
  episode: Episode,
  request: TokenEpisodeRequest,
  engine: TokenEngine,
  hooks: TurnHooks,
  affinity: string,
): Promise<TokenLog | null> {
  const { signal } = hooks;
  const prefill = episode.prefill;
  let log: TokenLog | null = null;
  // The conversation as chat messages, for the continuations and the template-drift check.
  const conversation: ChatMessage[] = [];
  const wanted = request.sampling.max_tokens;
  const floor = Math.min(wanted, request.minResponseTokens ?? 32);
  let end: TurnEnd | null = null;

  await playTurns(episode, hooks, async (turn) => {
    if (log === null) {
      const first = episode.promptMessages();
      conversation.push(...first);
      log = new TokenLog(await engine.firstPrompt(first, prefill, affinity, signal));
    }
    const limit = engine.limit;
    const room = limit === null ? wanted : Math.min(wanted, limit - log.length);
    if (room < floor) {
      episode.endContextFull();
      return;
    }
    const sample = await engine.generate(
      log.ids,
      { ...request.sampling, max_tokens: room, seed: requestSeed(request.seed, episode.envId, turn) },
      affinity,
      signal,
      log.idsJson(),
    );
    await turnSlot();
    if (sample.promptDrift) log.promptDrift++;
    const promptTokens = log.length;
    log.sampled(sample.ids, sample.logprobs, sample.versions);
    const raw = prefill + sample.text;
    conversation.push({ role: "assistant", content: raw });
    const turnEnd: TurnEnd = {
      lastId: sample.ids.at(-1),
      stoppedOnToken: sample.finishReason === "stop" && !sample.stoppedOnString,
    };
    // The last turn's end, for the drift check after the loop.
    end = turnEnd;
    let record = episode.applyResponse(raw, sample.finishReason, {
      prompt: promptTokens,
      completion: sample.ids.length,
      ...(sample.cachedTokens === null ? {} : { cached: sample.cachedTokens }),
      versions: sample.turnVersions,
    });
    if (record instanceof Promise) record = await record;
    log.reward(record.reward);
    if (!episode.active) return;
    conversation.push(episode.lastPromptMessage());
    log.inserted(
      await engine.continuation(conversation, turnEnd, prefill, affinity, signal, log.continuations),
    );
  });

  // An episode that failed before its first prompt still gets a (empty) log, so its group's arrays stay whole.
  const finished = (log as TokenLog | null) ?? new TokenLog([]);
  const turnEnds = finished.turnEnds;
  const turns = turnEnds.length;
  if (turns > 0 && !episode.failed && !signal?.aborted) {
    // Earlier episodes verified the template append-only, so this log is its rendering unless
    // a turn kept an end token of its own where the template closes it (no request to tell).
    const own =
      finished.continuations.substituted > 0 ||
      (end !== null && (await engine.standsIn(end, affinity, signal).catch(() => true)));
    if (engine.appendOnly && !own) finished.templateSkipped = true;
    else
      try {
        // The conversation as chat inference would render it, each turn's content as the engine decoded it.
        // Up to the last sampled id: after it the log may hold the next turn's prompt (context_full).
        const [text, rendering] = await Promise.all([
          engine.decode(finished.ids.slice(0, turnEnds[turns - 1]), affinity, signal),
          engine.renderText(conversation, affinity, signal),
        ]);
        finished.templateDrift = textDrift(text, rendering);
        // Drift an own end token explains verifies nothing either way.
        if (!own) engine.driftChecked(finished.templateDrift, turns);
      } catch {
        // A diagnostic: when it cannot be computed the figure stays unknown and the episode stands.
        finished.templateChecked = false;
      }
  }
  return finished;
}
