// Counts check phases of the event loop (setImmediate turns) until stopped: tests of work that
// must share the loop count its turns, never time.
export function loopTurns(): { stop: () => number } {
  let turns = 0;
  let running = true;
  const tick = () => {
    if (!running) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  return {
    stop: () => {
      running = false;
      return turns;
    },
  };
}
