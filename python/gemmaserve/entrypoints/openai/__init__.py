"""vLLM's ``vllm.entrypoints.openai`` module path."""
