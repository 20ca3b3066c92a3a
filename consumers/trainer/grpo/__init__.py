"""GRPO's own rules: which groups train and with what advantages, and what one step takes (``groups``), the
policy loss over packed tokens (``loss``, torch) and its settings apart from it (``loss_config``, standard
library only: the worker in megatron-bridge's venv loads it by its file, and the trainer's config needs no
torch), the off-policy bound per token (``stale_mask``) and each update's learning rate (``lr_schedule``).
No I/O. This ``__init__`` imports nothing, so that reading the settings never pulls in torch."""
