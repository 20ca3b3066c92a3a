"""How cua-stream runs Harbor's computer-1 agent against a session gateway.

- ``computer1``: the binding, a pure function from a session (URL, key, request args, served model,
  environment) to the ``AgentConfig`` and agent env that Harbor's ``Trial`` needs.
- ``qwen3vl``: ``Qwen3VLComputer1``, the computer-1 subclass the binding builds (normalized 0-999
  coordinates, Qwen3-VL-sized screenshots, call-kind markers on non-agent-loop calls).
- ``markers``: how a non-agent-loop request gets its ``cua_call_kind`` marker.
- ``harbor_env``, ``coordinates``, ``screenshots``: small pure helpers.

Nothing is imported here on purpose: ``harbor_env``, ``coordinates`` and ``screenshots`` stay cheap to
import, while ``computer1``, ``qwen3vl`` and ``markers`` pull in Harbor (several seconds).
"""
