// Env hosting's frames (the trainer owns inference): `env_open`, `env_step`, `env_close`. An env
// session lives on its connection; its episodes count against the session's budget until it
// closes, the connection ends, or it takes no step for env_idle_s. An accepted env_open or
// env_close and each step the env answers are work (c.worked): a connection keeps its place
// while its env sessions step, and only as long as that (a refused step is no work).
import type { EnvClose, EnvOpen, EnvStep } from "../../../protocol/messages.ts";
import { codeOf, isRefusal, messageOf } from "../../errors/boundary.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import { admitEnvSession } from "../admission.ts";
import { HostedEnvs } from "../env-host.ts";
import type { Session } from "../session.ts";
import type { Connection } from "./context.ts";

export function onEnvOpen(c: Connection, frame: EnvOpen): void {
  const { state, session, hosted } = c;
  const { options } = state;
  const { policy } = state.rolloutContext;
  const about = { id: frame.id };
  const { request, tokens } = admitEnvSession(state, session, hosted, frame);
  const envs = new HostedEnvs(
    state.registry,
    request,
    tokens,
    `env:${session.id}:${frame.id}`,
    (key) => policy.forget?.(key),
    frame.messages ?? "new",
    session.memory,
  );
  // Its episodes count from now until env_close, the connection's end, or env_idle_s without a step.
  hosted.set(frame.id, envs);
  session.hold(envs.size);
  envs.idleTimer = setTimeout(() => {
    if (!dropHosted(hosted, session, frame.id, envs)) return;
    c.refuse(new RollgymError("env_idle", { idleS: options.envIdleMs / 1000, id: frame.id }), about);
  }, options.envIdleMs);
  envs.idleTimer.unref();
  c.worked();
  // Built in slices (the event loop keeps serving); steps and close queue behind the build.
  void c.out.track(
    envs
      .serial(async () => {
        await envs.build();
        await envs.renderPrompts();
        // A token session's prompt ids are known only now.
        const over = state.memory.refusal(session.memory, 0, "this env session's prompt token ids");
        if (over)
          throw new RollgymError("memory_budget_prompts", {
            message: `${over} (${envs.heldBytes} bytes with them): open fewer episodes`,
          });
      })
      .then(
        () => {
          c.worked();
          c.reply({ type: "env_opened", id: frame.id, episodes: envs.opened() });
        },
        (error: unknown) => {
          if (!dropHosted(hosted, session, frame.id, envs)) return; // closed meanwhile
          if (codeOf(error) === "memory_budget_prompts") {
            c.refuse(error, about);
            return;
          }
          const message = messageOf(error);
          c.refuse(new RollgymError("env_open_failed", { message, engine: envs.tokenSession }), about);
        },
      ),
  );
}

export function onEnvStep(c: Connection, frame: EnvStep): void {
  const { state, session, hosted } = c;
  const about = { id: frame.id };
  const envs = openEnvs(hosted, frame.id);
  const adds = HostedEnvs.bytesOf(frame.responses);
  const over = state.memory.refusal(session.memory, adds, "this step");
  if (over)
    throw new RollgymError("memory_budget_step", {
      message: `${over}: close an env session, or wait for others to`,
    });
  // Counted now, so steps queued behind this one are checked against it too.
  envs.charge(adds);
  envs.idleTimer?.refresh();
  const refuse = (error: unknown): void => {
    const message = messageOf(error);
    if (isRefusal(error)) {
      envs.charge(-adds); // refused (env-host.ts) before anything was applied
      c.refuse(error, about);
    } else if (envs.tokenSession) {
      // Its responses are applied but its next ids are not known: the session cannot go on.
      dropHosted(hosted, session, frame.id, envs);
      c.refuse(new RollgymError("env_step_engine", { message, id: frame.id }), about);
    } else {
      state.log.error({ err: error }, "env step failed");
      c.refuse(new RollgymError("internal", { message }), about);
    }
  };
  void c.out.track(
    envs
      .serial(async () => (envs.tokenSession ? envs.stepTokens(frame.responses) : envs.step(frame.responses)))
      .then((results) => {
        c.worked();
        c.reply({ type: "env_stepped", id: frame.id, results });
      }, refuse),
  );
}

export function onEnvClose(c: Connection, frame: EnvClose): void {
  const { session, hosted } = c;
  const envs = openEnvs(hosted, frame.id);
  hosted.delete(frame.id);
  c.worked();
  // A session closes after the steps it has queued (and, when still opening, after its build).
  void c.out.track(
    envs.serial(async () => {
      c.reply({ type: "env_closed", id: frame.id, ...envs.close() });
      envs.dispose();
      session.release(envs.size);
    }),
  );
}

function openEnvs(hosted: Map<string, HostedEnvs>, id: string): HostedEnvs {
  const envs = hosted.get(id);
  if (!envs) throw new RollgymError("unknown_env_session", { id });
  return envs;
}

/**
 * Ends env session `id` if `envs` is still hosted under it (a session closed meanwhile is its
 * env_close's to release). Returns whether it did.
 */
export function dropHosted(
  hosted: Map<string, HostedEnvs>,
  session: Session,
  id: string,
  envs: HostedEnvs,
): boolean {
  if (hosted.get(id) !== envs) return false;
  hosted.delete(id);
  envs.dispose();
  session.release(envs.size);
  return true;
}
