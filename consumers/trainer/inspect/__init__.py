"""``cua-stream inspect`` and the dashboard's inspect route: a trained step rebuilt from the run's records
alone (``step``, pure), an episode's call tree as the trainer sees it (``episode``, pure), a past step
measured again beside its record (``recompute``, pure), the reads they start from (``read``) and their
text and JSON (``render``)."""
