// A planted-bug Vercel World for durasim's tests: @workflow/world-local (its entry given as
// config.innerEntry) with ONE rule broken: run_started on an ended run is accepted (the
// inner World's RunExpiredError is swallowed) instead of refused.  durasim conformance
// --vercel must report it as a violation.
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
          const owner = name ? world[name] : world;
          try {
            return await owner[method](...args);
          } catch (error) {
            if (error?.constructor?.name === 'RunExpiredError') return {};
            throw error;
          }
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
