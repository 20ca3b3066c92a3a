"""The trainer: samples from the stream, GRPO groups, the off-policy bound.

``samples`` turns an episode's recorded calls into training samples and ``grpo`` decides which groups
train and with what advantages: both pure. The Kafka join, the backends and the daemon build on them.
"""
