"""The CPU reference engine: SGLang's native HTTP API over a transformers Qwen3-VL model."""
