"""The scorer: outcomes become rewards or reason-coded discards, exactly once per episode.

The scoring table itself is ``cua_stream.scoring`` (pure; producers count their episodes by it too);
``transform`` is the exactly-once stage around it (dedup by episode_id, per-reason metrics); ``config`` its
settings; ``daemon`` wires it to Kafka (``cua-stream scorer``).
"""
