"""Model helpers: the tiny offline Qwen3-VL used by tests and the laptop demo."""
