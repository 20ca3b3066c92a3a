"""``cua-stream learn``: its plan (``plan``), the pipeline that runs it (``pipeline``), its SFT and GRPO
phases (``sft``, ``grpo``), its closing report (``report``) and the trend test of its curve (``trend``)."""
