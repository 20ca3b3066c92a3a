"""A run's recorded steps trained again, and runs compared: the settings a trainer publishes as a record
(``settings``) and how two differ (``settings_diff``), the batches and settings read back from a run's log
(``rerun``, which the daemon replays), ``cua-stream retrain``'s decisions (``plan``, pure) and its I/O edge
(``prepare``: the source run read, the checkpoint directory prepared), and ``cua-stream runs compare``
(``compare``, pure)."""
