"""``cua-stream eval``'s work: an evaluation's episodes (``episodes``, shared with ``learn``), a policy
evaluated once (``run``) or a training run's versions followed (``follow``), and the tables they print
(``results_table``, ``benchmark_table``)."""
