// A planted-bug Vercel World for durasim's tests: @workflow/world-local (its entry given as
// config.innerEntry) with ONE rule broken: step_completed loses the step's result (the
// step entity and the event keep an empty payload).  durasim conformance --vercel must
// report it as a violation.
export function createWorld(config = {}) {
  const inner = import(config.innerEntry).then((m) =>
    (m.createWorld ?? m.createLocalWorld)({ dataDir: config.dataDir }),
  );
  const facet = (name) =>
    new Proxy(
      {},
      {
        get: (_, method) => async (...args) => {
          const world = await inner;
          if (name === 'events' && method === 'create' && args[1]?.eventType === 'step_completed') {
            args[1] = { ...args[1], eventData: { ...args[1].eventData, result: new Uint8Array() } };
          }
          const owner = name ? world[name] : world;
          return owner[method](...args);
        },
      },
    );
  return {
    specVersion: 3,
    runs: facet('runs'),
    steps: facet('steps'),
    events: facet('events'),
    hooks: facet('hooks'),
    close: async () => (await inner).close?.(),
  };
}
