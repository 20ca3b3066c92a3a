"""Evaluation of a policy on a task set (``cua-stream eval``): the plan (tasks x layouts x samples, on
layouts training never uses), the results file, and the statistics over it (pure)."""
