"""What trains: the torch backend (a transformers Qwen3-VL in this process, ``torch_backend``), and the
Megatron ones, on packed (THD) batches (``packing``): megatron-core's model code in this process
(``megatron_backend``) or megatron-bridge's Qwen3-VL in a worker of its own venv (``megatron_vl_backend``
driving ``megatron/worker.py``). Each takes a step's items and returns its loss statistics; all apply
the same GRPO loss (``consumers/trainer/grpo/loss.py``)."""
