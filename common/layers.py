"""The project's code folders as layers, bottom first: a module imports only from its own folder and those before it."""

LAYERS = ("common", "cluster", "data", "tables", "models", "online", "coordinator", "evaluator", "launcher", "roles",
          "bench")
