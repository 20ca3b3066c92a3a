"""Chaos runs of the whole loop: a seeded fault schedule (``fault_schedule``), the supervisor that applies it
to real daemons (``runner``), and the invariants checked from the topics afterwards (``invariants``)."""
