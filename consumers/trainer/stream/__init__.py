"""The trainer's side of the stream: the work it issues, one GRPO group per index (``feeder``), what it
reads and one poll of it (``intake``), one run's turns, summaries and scores joined into groups
(``join``, pure), and a complete group judged before it may queue (``judge``: dropped, with its records
dead-lettered, when they break what training relies on)."""
