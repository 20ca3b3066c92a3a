"""The trainer: samples from the stream, GRPO groups, the off-policy bound.

A subpackage per job, each building on the ones before it: ``episodes`` (an episode's calls → samples, the
checks a record must pass), ``grpo`` (which groups train, their advantages, the loss), ``sft`` (demonstrations
and their loss), ``stream`` (the work issued, the join into groups, a group judged), ``backends`` (torch and
Megatron), then ``retrain`` (a run's steps trained again, runs compared) and ``inspect`` (a step rebuilt from
its records). Here at the top: the daemon (``daemon``, started by ``entry``), its config, what it holds
between polls (``state``), a step's batch and record, the checkpoint and the commit protocol, the engine's
weights, its metrics and sinks; and the SFT run (``sft_run``).
"""
