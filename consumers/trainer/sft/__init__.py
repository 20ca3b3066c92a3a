"""What supervised fine-tuning trains on: which episodes are demonstrations, their batches and the SFT
loss (``demonstrations``), and demonstrations drawn on layouts nobody played (``drawn``). Pure; the run
itself (reading the topics, training, saving a model) is ``consumers/trainer/sft_run.py``."""
