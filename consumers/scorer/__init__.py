"""The scorer: outcomes become rewards or reason-coded discards, exactly once per episode.

``table`` is the pure scoring table; ``transform`` the exactly-once stage around it (dedup by
episode_id, per-reason metrics); ``daemon`` wires it to Kafka (``cua-stream scorer``).
"""
