"""The application: what wires the stages together into commands a person runs (the demo, the launch
presets, the learn pipeline, evaluations, the in-process stack of broker, engine, gateway, producer and
scorer, the chaos harness, an inspected step's recomputation). It may import every stage (producers,
consumers) and every library module; nothing under ``cua_stream`` outside ``app/`` and ``cli/`` imports
it (``tests/unit/test_house.py``). The CLI above it parses arguments and calls it."""
